// The AVX-512 build of the MXFP8 kernels (mxfp8_isa.h); mxfp8.cc uses it when the CPU supports it.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "collectives/kernels/mxfp8_isa.h"
#include "common/float_formats.h"

#if defined(__x86_64__) && defined(__GNUC__)

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,prefer-vector-width=512")
#include "collectives/kernels/mxfp8_kernels.inc"
#pragma GCC pop_options

namespace fsdp::mx::detail {
const Kernels& avx512_kernels() { return kKernels; }
}  // namespace fsdp::mx::detail

#else

namespace fsdp::mx::detail {
const Kernels& avx512_kernels() { return baseline_kernels(); }  // never chosen: isa_supported() is false
}  // namespace fsdp::mx::detail

#endif
