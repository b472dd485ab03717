#include "common/float_formats.h"

#include <array>
#include <bit>

namespace fsdp {
namespace {

constexpr uint32_t kF32AbsMask = 0x7fffffff;
constexpr uint32_t kF32Inf = 0x7f800000;
constexpr uint32_t kF32MantMask = 0x007fffff;

// x >> shift, rounded to nearest with ties to even. shift is in [1, 31].
constexpr uint32_t shift_round_even(uint32_t x, int shift) {
  const uint32_t q = x >> shift;
  const uint32_t rem = x & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
}

// Rounds a finite non-negative f32 (given as bits) to the magnitude bits (exponent:mantissa) of a narrow format.
// Callers filter NaN and values past their overflow threshold first. A carry out of the mantissa bumps the
// exponent, which is exactly the next representable value, so no special case is needed for it.
template <int kMantBits, int kBias>
constexpr uint32_t round_magnitude(uint32_t a) {
  const int exp = static_cast<int>(a >> 23);
  constexpr int kMinNormalExp = 127 - kBias + 1;
  if (exp >= kMinNormalExp) {
    const uint32_t rebased = a - (static_cast<uint32_t>(127 - kBias) << 23);
    return shift_round_even(rebased, 23 - kMantBits);
  }
  // Narrow subnormal: express the full significand in units of the narrow format's smallest subnormal.
  const int shift = 151 - kBias - kMantBits - exp;
  if (shift > 24) return 0;  // below half the smallest subnormal, f32 subnormals included
  return shift_round_even((a & kF32MantMask) | (kF32MantMask + 1), shift);
}

// f32 bits of a finite narrow value with the given exponent field and mantissa (sign excluded).
template <int kMantBits, int kBias>
constexpr uint32_t decode_finite(uint32_t exp, uint32_t mant) {
  if (exp != 0) return ((exp + 127 - kBias) << 23) | (mant << (23 - kMantBits));
  if (mant == 0) return 0;
  // Subnormal: the leading one of mant becomes f32's implicit bit.
  const int p = std::bit_width(mant) - 1;
  return (static_cast<uint32_t>(127 - kBias + 1 - kMantBits + p) << 23) | ((mant << (23 - p)) & kF32MantMask);
}

constexpr std::array<uint32_t, 256> make_e4m3_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t v = 0; v < 256; ++v) {
    const uint32_t sign = (v & 0x80) << 24;
    if ((v & 0x7f) == 0x7f) {
      t[v] = sign | 0x7fc00000;  // e4m3fn spends its all-ones pattern on NaN instead of infinity
    } else {
      t[v] = sign | decode_finite<3, 7>((v >> 3) & 0xf, v & 0x7);
    }
  }
  return t;
}

constexpr std::array<uint32_t, 256> make_e5m2_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t v = 0; v < 256; ++v) {
    const uint32_t sign = (v & 0x80) << 24;
    const uint32_t exp = (v >> 2) & 0x1f;
    const uint32_t mant = v & 0x3;
    t[v] = sign | (exp == 0x1f ? kF32Inf | (mant << 21) : decode_finite<2, 15>(exp, mant));
  }
  return t;
}

// constexpr so the tables live in .rodata and are valid during other translation units' static init.
constexpr std::array<uint32_t, 256> kE4m3ToF32 = make_e4m3_table();
constexpr std::array<uint32_t, 256> kE5m2ToF32 = make_e5m2_table();

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | kF32Inf | (mant << 13));  // payload kept
  return std::bit_cast<float>(sign | decode_finite<10, 15>(exp, mant));
}

uint16_t float_to_half(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t a = u & kF32AbsMask;
  if (a > kF32Inf) return static_cast<uint16_t>(sign | 0x7e00 | ((a >> 13) & 0x3ff));  // quiet, top payload kept
  // 65520 is the midpoint between max 65504 (odd mantissa) and 2^16, so the tie goes up to infinity too.
  if (a >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);
  return static_cast<uint16_t>(sign | round_magnitude<10, 15>(a));
}

float e4m3_to_float(uint8_t v) { return std::bit_cast<float>(kE4m3ToF32[v]); }

uint8_t float_to_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 24) & 0x80;
  const uint32_t a = u & kF32AbsMask;
  // Past max 448 the next step would be 480, whose pattern is NaN. The midpoint 464 ties to 448 (even
  // mantissa); anything above it, infinities and NaN included, becomes NaN as in PyTorch's cast.
  if (a > 0x43e80000) return static_cast<uint8_t>(sign | 0x7f);
  return static_cast<uint8_t>(sign | round_magnitude<3, 7>(a));
}

float e5m2_to_float(uint8_t v) { return std::bit_cast<float>(kE5m2ToF32[v]); }

uint8_t float_to_e5m2(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 24) & 0x80;
  const uint32_t a = u & kF32AbsMask;
  if (a > kF32Inf) return static_cast<uint8_t>(sign | 0x7f);
  // 61440 is the midpoint between max 57344 (odd mantissa) and 2^16, so the tie goes to infinity.
  if (a >= 0x47700000) return static_cast<uint8_t>(sign | 0x7c);
  return static_cast<uint8_t>(sign | round_magnitude<2, 15>(a));
}

}  // namespace fsdp
