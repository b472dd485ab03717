// Scalar conversions between f32 and the 16- and 8-bit float formats. Float-to-narrow conversions round
// to nearest, ties to even. Overflow follows PyTorch's casts: f16, bf16 and e5m2 go to +-inf; e4m3fn
// (no infinities, max 448) goes to NaN. NaN stays NaN.
#pragma once

#include <cstdint>

namespace fsdp {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);
float e4m3_to_float(uint8_t v);
uint8_t float_to_e4m3(float f);
float e5m2_to_float(uint8_t v);
uint8_t float_to_e5m2(float f);

}  // namespace fsdp
