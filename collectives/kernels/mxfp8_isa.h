// The MXFP8 kernels are compiled once per x86 instruction set (mxfp8_kernels.inc: baseline SSE2 in
// mxfp8.cc, AVX2 in mxfp8_avx2.cc, AVX-512 in mxfp8_avx512.cc) from the same source, so every build gives
// the same bits; mxfp8.cc picks the widest one the CPU supports at run time. Internal to the format layer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/kernels/mxfp8.h"

namespace fsdp::mx::detail {

// One instruction set's kernels. Arguments are validated by the public functions in mxfp8.h.
struct Kernels {
  // n elements of `in` (kFloat32 or kBfloat16) -> wire_bytes(n) bytes of wire.
  void (*quantize)(const void* in, DataType in_type, size_t n, uint8_t* wire, Format f);
  // Elements [first, first + n) of the count-element encoding at wire -> out[0, n): kFloat32 or kBfloat16
  // out_type; `via_bf16` rounds an f32 output to bf16 (and back) on the way.
  void (*dequantize)(const uint8_t* wire, size_t count, size_t first, size_t n, DataType element, void* out,
                     DataType out_type, bool via_bf16);
  // acc[i] += decoded element i (f32).
  void (*dequantize_add)(const uint8_t* wire, size_t n, DataType element, float* acc);
};

const Kernels& baseline_kernels();
const Kernels& avx2_kernels();
const Kernels& avx512_kernels();

}  // namespace fsdp::mx::detail
