// The facts of NVIDIA's nccl.h (its include directory is the only one given to this file).
#include <nccl.h>

#ifdef FSDP_NCCL
#error "NVIDIA's nccl.h was expected here, not the FSDP runtime's"
#endif

#define FACTS_FUNCTION nvidia_facts
#include "facts.inc"
