// Scalar conversions between f32 and the 16- and 8-bit float formats. Float-to-narrow conversions round
// to nearest, ties to even. Overflow follows PyTorch's casts: f16, bf16 and e5m2 go to +-inf; e4m3fn
// (no infinities, max 448) goes to NaN. NaN stays NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace fsdp {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
// bf16 conversions are inline so element-wise kernels (the MXFP8 decoder) vectorise around them.
inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  // Overflow needs no check: a carry out of the largest finite value lands on the infinity pattern.
  const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
  // Rounding could carry a NaN's payload into the exponent and make it infinity; quieten instead. A select,
  // not a branch, so loops over this vectorise (signed compare: the masked value fits, SSE2 has no other).
  const bool nan = static_cast<int32_t>(u & 0x7fffffff) > 0x7f800000;
  return static_cast<uint16_t>(nan ? (u >> 16) | 0x40 : rounded);
}
float e4m3_to_float(uint8_t v);
uint8_t float_to_e4m3(float f);
float e5m2_to_float(uint8_t v);
uint8_t float_to_e5m2(float f);

}  // namespace fsdp
