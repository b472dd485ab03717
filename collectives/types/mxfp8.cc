#include "collectives/types/mxfp8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/float_formats.h"

namespace fsdp::mx {
namespace {

constexpr uint32_t kF32AbsMask = 0x7fffffff;
constexpr uint32_t kF32Inf = 0x7f800000;
constexpr uint32_t kF32MantMask = 0x007fffff;
// Both element formats' max is 1.75 * 2^emax: f32 mantissa field 0x600000.
constexpr uint32_t kMaxSignificandMant = 0x600000;

// Per element format: mantissa bits, exponent bias, emax (exponent of the max), f32 bits of the max,
// and the code an infinity encodes to.
template <DataType kType, int kMant, int kBias, int kEmax, uint32_t kMaxBits, uint32_t kInfCode>
struct ElementTraits {
  static constexpr DataType type = kType;
  static constexpr int mant = kMant;
  static constexpr int bias = kBias;
  static constexpr int emax = kEmax;
  static constexpr uint32_t max_bits = kMaxBits;
  static constexpr uint32_t inf_code = kInfCode;
};
using E4m3 = ElementTraits<DataType::kFloat8E4M3, 3, 7, 8, 0x43e00000 /* 448 */, 0x7f /* NaN: no infinity */>;
using E5m2 = ElementTraits<DataType::kFloat8E5M2, 2, 15, 15, 0x47600000 /* 57344 */, 0x7c>;

// 2^e as f32 for e in [-127, 127], built from bits (std::ldexp per block costs more than the block).
inline float pow2(int e) {
  return std::bit_cast<float>(e >= -126 ? static_cast<uint32_t>(e + 127) << 23 : uint32_t{0x00400000});
}

int emax_of(DataType element) {
  if (element == DataType::kFloat8E4M3) return E4m3::emax;
  if (element == DataType::kFloat8E5M2) return E5m2::emax;
  throw std::invalid_argument("mxfp8: element type must be fp8_e4m3 or fp8_e5m2, got " + std::string(name(element)));
}

// f32 -> element code, rounded to nearest even, branch-free so a block's 32 lanes vectorise (signed
// 32-bit lanes: magnitudes fit, and SSE2 has signed compares only).
// y = x / scale; finite |y| above the max saturates (only floor rounding produces such y).
template <class T>
inline uint8_t encode(float y) {
  const auto u = std::bit_cast<int32_t>(y);
  const int32_t sign = (u >> 24) & 0x80;
  int32_t a = u & 0x7fffffff;
  constexpr auto kInf = static_cast<int32_t>(kF32Inf), kMax = static_cast<int32_t>(T::max_bits);
  const int32_t special = a == kInf ? static_cast<int32_t>(T::inf_code) : 0x7f;
  const bool nonfinite = a >= kInf;
  a = a < kMax ? a : kMax;
  // Normal: rebias the exponent and round the mantissa to nearest even.
  constexpr int kShift = 23 - T::mant;
  const int32_t odd = (a >> kShift) & 1;
  const int32_t normal = (a - ((127 - T::bias) << 23) + ((1 << (kShift - 1)) - 1) + odd) >> kShift;
  // Subnormal: adding 2^(emin - mant + 23) makes the FPU round to the element's subnormal step; a
  // round-up to the smallest normal comes out as its code (exponent 1, mantissa 0).
  constexpr int32_t kMagicBits = ((127 - T::bias) + (23 - T::mant) + 1) << 23;
  const int32_t sub = std::bit_cast<int32_t>(std::bit_cast<float>(a) + std::bit_cast<float>(kMagicBits)) - kMagicBits;
  constexpr int32_t kMinNormalBits = (127 - T::bias + 1) << 23;
  int32_t code = a < kMinNormalBits ? sub : normal;
  code = nonfinite ? special : code;
  return static_cast<uint8_t>(sign | code);
}

// One block of f32 values, zero-padded to 32 (zeros change neither the scale nor the kept codes):
// its scale, then 32 element codes. Fixed trip counts and no branches, so both loops vectorise.
template <class T>
uint8_t quantize_block(const float* x, uint8_t* codes, ScaleRounding rounding) {
  // Lane-wise, then a halving tree: a plain float max reduction does not vectorise without
  // -ffinite-math-only, a tree of element-wise maxes does. NaN fails every comparison.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  alignas(64) float m[kBlockSize];
  int32_t nan = 0;
  for (size_t i = 0; i < kBlockSize; ++i) {
    const float a = std::fabs(x[i]);
    nan |= a != a;
    m[i] = a < kInf ? a : 0.0f;
  }
  auto fold = [&m]<size_t kWidth>() {  // constant widths: straight-line vector code, no alias checks
    for (size_t i = 0; i < kWidth; ++i) m[i] = m[i] > m[i + kWidth] ? m[i] : m[i + kWidth];
  };
  fold.template operator()<16>();
  fold.template operator()<8>();
  fold.template operator()<4>();
  fold.template operator()<2>();
  fold.template operator()<1>();
  const float max_finite = m[0];
  const uint8_t scale =
      nan ? kScaleNaN : choose_scale(max_finite, Format{T::type, rounding});
  // 1 / scale, exact: the scale exponent is in [-127, 120] for finite f32 input, so its inverse is normal.
  const float inv = scale == kScaleNaN ? 1.0f : pow2(kScaleBias - static_cast<int>(scale));
  for (size_t i = 0; i < kBlockSize; ++i) codes[i] = encode<T>(x[i] * inv);
  return scale;
}

std::array<float, 256> make_table(DataType element) {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const auto v = static_cast<uint8_t>(c);
    t[c] = element == DataType::kFloat8E4M3 ? e4m3_to_float(v) : e5m2_to_float(v);
  }
  return t;
}

const std::array<float, 256>& decode_table(DataType element) {
  emax_of(element);  // validates
  static const std::array<float, 256> e4m3 = make_table(DataType::kFloat8E4M3);
  static const std::array<float, 256> e5m2 = make_table(DataType::kFloat8E5M2);
  return element == DataType::kFloat8E4M3 ? e4m3 : e5m2;
}

void check_wide(DataType t, const char* what) {
  if (t != DataType::kFloat32 && t != DataType::kBfloat16) {
    throw std::invalid_argument(std::string("mxfp8 ") + what + ": type must be float or bfloat16, got " +
                                std::string(name(t)));
  }
}

// Calls fn(block_index, first_element, elements_in_block) over the blocks of n elements.
template <class Fn>
void for_each_block(size_t n, Fn&& fn) {
  for (size_t b = 0, i = 0; i < n; ++b, i += kBlockSize) fn(b, i, std::min(kBlockSize, n - i));
}

}  // namespace

std::optional<Format> parse_format(std::string_view s) {
  if (s == "mxfp8" || s == "mxfp8_e4m3") return Format{DataType::kFloat8E4M3, ScaleRounding::kCeil};
  if (s == "mxfp8_e5m2") return Format{DataType::kFloat8E5M2, ScaleRounding::kCeil};
  return std::nullopt;
}

float scale_to_float(uint8_t code) {
  if (code == kScaleNaN) return std::numeric_limits<float>::quiet_NaN();
  return pow2(static_cast<int>(code) - kScaleBias);
}

uint8_t choose_scale(float amax, Format f) {
  const int emax = emax_of(f.element);
  const uint32_t a = std::bit_cast<uint32_t>(amax) & kF32AbsMask;
  // An all-zero block may take any scale: 1, not 2^-127, whose f32 form is subnormal and would make every
  // decode of the block a slow subnormal multiply. (Callers handle NaN; infinities never reach here.)
  if (a == 0 || a >= kF32Inf) return kScaleBias;
  // amax = 1.m * 2^e with m normalised (f32 subnormals included).
  int e = static_cast<int>(a >> 23) - 127;
  uint32_t mant = a & kF32MantMask;
  if ((a >> 23) == 0) {
    const int p = std::bit_width(mant) - 1;
    e = p - 149;
    mant = (mant << (23 - p)) & kF32MantMask;
  }
  int exp = e - emax;
  if (f.rounding == ScaleRounding::kCeil && mant > kMaxSignificandMant) ++exp;  // amax / 2^exp would pass the max
  exp = std::clamp(exp, -kScaleBias, kScaleBias);
  return static_cast<uint8_t>(exp + kScaleBias);
}

void quantize(const void* in, DataType in_type, size_t n, uint8_t* wire, Format f) {
  check_wide(in_type, "quantize");
  emax_of(f.element);
  uint8_t* scales = wire + n;
  auto block = [&](const float* x, uint8_t* codes) {
    return f.element == DataType::kFloat8E4M3 ? quantize_block<E4m3>(x, codes, f.rounding)
                                              : quantize_block<E5m2>(x, codes, f.rounding);
  };
  for_each_block(n, [&](size_t b, size_t first, size_t m) {
    if (m == kBlockSize && in_type == DataType::kFloat32) {  // whole f32 block: straight from and to place
      scales[b] = block(static_cast<const float*>(in) + first, wire + first);
      return;
    }
    alignas(64) float x[kBlockSize];
    alignas(64) uint8_t codes[kBlockSize];
    if (in_type == DataType::kFloat32) {
      std::copy_n(static_cast<const float*>(in) + first, m, x);
    } else if (m == kBlockSize) {
      const uint16_t* src = static_cast<const uint16_t*>(in) + first;
      for (size_t i = 0; i < kBlockSize; ++i) x[i] = bf16_to_float(src[i]);
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(in) + first;
      for (size_t i = 0; i < m; ++i) x[i] = bf16_to_float(src[i]);
    }
    std::fill(x + m, x + kBlockSize, 0.0f);  // a tail: zeros change neither the scale nor the kept codes
    scales[b] = block(x, codes);
    std::copy_n(codes, m, wire + first);
  });
}

void dequantize(const uint8_t* wire, size_t n, DataType element, void* out, DataType out_type) {
  check_wide(out_type, "dequantize");
  const auto& table = decode_table(element);
  const uint8_t* scales = wire + n;
  for_each_block(n, [&](size_t b, size_t first, size_t m) {
    const float s = scale_to_float(scales[b]);
    const uint8_t* codes = wire + first;
    if (out_type == DataType::kFloat32) {
      float* dst = static_cast<float*>(out) + first;
      for (size_t i = 0; i < m; ++i) dst[i] = table[codes[i]] * s;
    } else {
      uint16_t* dst = static_cast<uint16_t*>(out) + first;
      for (size_t i = 0; i < m; ++i) dst[i] = float_to_bf16(table[codes[i]] * s);
    }
  });
}

void dequantize_add(const uint8_t* wire, size_t n, DataType element, float* acc) {
  const auto& table = decode_table(element);
  const uint8_t* scales = wire + n;
  for_each_block(n, [&](size_t b, size_t first, size_t m) {
    const float s = scale_to_float(scales[b]);
    for (size_t i = 0; i < m; ++i) acc[first + i] += table[wire[first + i]] * s;
  });
}

}  // namespace fsdp::mx
