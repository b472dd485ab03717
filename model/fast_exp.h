// exp for the model's elementwise passes (softmax, SiLU) in a form the compiler vectorizes: no call,
// no branch. Cephes' expf: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, and 2^n
// written into the exponent bits. Within 2 ulp of std::exp on [-87.3, 88.3]; arguments outside are
// clamped there (about 1.2e-38 and 2.4e38), NaN stays NaN. glibc's expf is a call per element, which
// was 13% of a debug-model step. Callers run it under FlushDenormals (model/flush_denormals.h): GCC
// vectorizes the clamps by computing the clamped cases in every lane, whose denormal by-products would
// otherwise cost a microcode assist per vector instruction.
#pragma once

#include <bit>
#include <cstdint>

namespace fsdp::model {

inline float exp_fast(float x) {
  x = x < -87.33654f ? -87.33654f : x;  // vectorized as min/max under -fno-trapping-math
  x = x > 88.37626f ? 88.37626f : x;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 in two parts: r exact enough
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

}  // namespace fsdp::model
