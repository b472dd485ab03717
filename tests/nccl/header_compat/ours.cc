// The facts of our nccl.h. With FSDP_WITH_CUDA_RUNTIME the CUDA runtime header comes first, so this
// also checks that nccl.h then takes CUDA's cudaStream_t instead of declaring its own.
#ifdef FSDP_WITH_CUDA_RUNTIME
#include <cuda_runtime.h>
#endif
#include "nccl.h"

#ifndef FSDP_NCCL
#error "the nccl.h of the FSDP runtime was expected here"
#endif

#define FACTS_FUNCTION our_facts
#include "facts.inc"
