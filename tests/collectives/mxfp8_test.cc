// MXFP8 format: every representable element value round-trips, the kernels match a plain scalar
// reference bit for bit (f32 and bf16 input, E4M3 and E5M2, ceil and floor scales, tails), the OCP
// spec's edge cases, NaN/Inf, and the worst relative error of in-range elements.
#include "collectives/kernels/mxfp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "common/float_formats.h"

namespace fsdp::mx {
namespace {

constexpr DataType kE4 = DataType::kFloat8E4M3;
constexpr DataType kE5 = DataType::kFloat8E5M2;

float max_of(DataType el) { return el == kE4 ? 448.0f : 57344.0f; }
int emax_of(DataType el) { return el == kE4 ? 8 : 15; }
int emin_of(DataType el) { return el == kE4 ? -6 : -14; }
int mant_bits(DataType el) { return el == kE4 ? 3 : 2; }
uint8_t to_code(DataType el, float y) { return el == kE4 ? float_to_e4m3(y) : float_to_e5m2(y); }
float from_code(DataType el, uint8_t c) { return el == kE4 ? e4m3_to_float(c) : e5m2_to_float(c); }
bool is_nan_code(DataType el, uint8_t c) { return std::isnan(from_code(el, c)); }
bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// The scalar reference, written from the spec's definitions with libm instead of bit tricks.
int reference_scale_exp(float amax, Format f) {
  if (amax == 0) return 0;  // any scale fits an all-zero block: 1
  int k = 0;
  std::frexp(amax, &k);  // amax = g * 2^k, g in [0.5, 1)
  int exp = (k - 1) - emax_of(f.element);
  if (f.rounding == ScaleRounding::kCeil && static_cast<double>(amax) > std::ldexp(double{max_of(f.element)}, exp)) {
    ++exp;
  }
  return std::clamp(exp, -127, 127);
}

std::vector<uint8_t> reference_quantize(const std::vector<float>& x, Format f) {
  const size_t n = x.size();
  std::vector<uint8_t> wire(wire_bytes(n));
  for (size_t b = 0; b < block_count(n); ++b) {
    const size_t first = b * kBlockSize, last = std::min(n, first + kBlockSize);
    float amax = 0;
    bool nan = false;
    for (size_t i = first; i < last; ++i) {
      if (std::isnan(x[i])) nan = true;
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
    }
    const int exp = reference_scale_exp(amax, f);
    wire[n + b] = nan ? 0xFF : static_cast<uint8_t>(exp + 127);
    for (size_t i = first; i < last; ++i) {
      float y = nan ? x[i] : static_cast<float>(std::ldexp(double{x[i]}, -exp));
      if (std::isfinite(y) && std::fabs(y) > max_of(f.element)) y = std::copysign(max_of(f.element), y);
      wire[i] = to_code(f.element, y);
    }
  }
  return wire;
}

std::vector<float> reference_dequantize(const std::vector<uint8_t>& wire, size_t n, DataType el) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t s = wire[n + i / kBlockSize];
    const float scale = s == 0xFF ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, int{s} - 127);
    out[i] = from_code(el, wire[i]) * scale;
  }
  return out;
}

std::vector<uint8_t> quantize_f32(const std::vector<float>& x, Format f) {
  std::vector<uint8_t> wire(wire_bytes(x.size()));
  quantize(x.data(), DataType::kFloat32, x.size(), wire.data(), f);
  return wire;
}

std::vector<float> dequantize_f32(const std::vector<uint8_t>& wire, size_t n, DataType el) {
  std::vector<float> out(n);
  dequantize(wire.data(), n, el, out.data(), DataType::kFloat32);
  return out;
}

// Values over many binades, signs, zeros and element-subnormal magnitudes inside each block.
std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> block_exp(-60, 60), spread(-25, 0), coin(0, 15);
  std::vector<float> x(n);
  int base = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i % kBlockSize == 0) base = block_exp(rng);
    const int c = coin(rng);
    x[i] = c == 0 ? 0.0f : std::ldexp(mant(rng), base + spread(rng)) * (c % 2 ? -1.0f : 1.0f);
  }
  return x;
}

// Every test of the format runs once per instruction set the kernels are built for (mxfp8.h's Isa),
// skipped where this CPU lacks it: all must equal the scalar reference.
constexpr Isa kIsas[] = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512};

class Mxfp8Formats : public ::testing::TestWithParam<std::tuple<Format, Isa>> {
 protected:
  void SetUp() override {
    if (!isa_supported(isa())) GTEST_SKIP() << isa_name(isa()) << " not supported on this CPU";
    use_isa(isa());
  }
  void TearDown() override { use_isa(best_isa()); }
  Format format() const { return std::get<0>(GetParam()); }
  Isa isa() const { return std::get<1>(GetParam()); }
};

INSTANTIATE_TEST_SUITE_P(All, Mxfp8Formats,
                         ::testing::Combine(::testing::Values(Format{kE4, ScaleRounding::kCeil},
                                                              Format{kE5, ScaleRounding::kCeil},
                                                              Format{kE4, ScaleRounding::kFloor},
                                                              Format{kE5, ScaleRounding::kFloor}),
                                            ::testing::ValuesIn(kIsas)),
                         [](const auto& info) {
                           const Format f = std::get<0>(info.param);
                           return std::string(f.element == kE4 ? "E4M3" : "E5M2") +
                                  (f.rounding == ScaleRounding::kCeil ? "_ceil_" : "_floor_") +
                                  std::string(isa_name(std::get<1>(info.param)));
                         });

// Every non-NaN element code, 31 to a block behind the format's max (which pins the scale to 2^exp
// under both roundings), comes back as the same code and decodes to its value times the scale.
TEST_P(Mxfp8Formats, EveryRepresentableValueRoundTrips) {
  const Format f = format();
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c) {
    if (!is_nan_code(f.element, static_cast<uint8_t>(c))) codes.push_back(static_cast<uint8_t>(c));
  }
  for (int exp : {-127, -100, -20, -1, 0, 1, 7, 100}) {
    std::vector<float> x;
    std::vector<uint8_t> want;
    for (size_t k = 0; k < codes.size(); ++k) {
      if (x.size() % kBlockSize == 0) {
        x.push_back(std::ldexp(max_of(f.element), exp));
        want.push_back(to_code(f.element, max_of(f.element)));
      }
      x.push_back(std::ldexp(from_code(f.element, codes[k]), exp));
      want.push_back(codes[k]);
    }
    // Every value * 2^exp here is exact in f32 (2^-143 at the least, above f32's 2^-149).
    const auto wire = quantize_f32(x, f);
    const auto back = dequantize_f32(wire, x.size(), f.element);
    for (size_t b = 0; b < block_count(x.size()); ++b) ASSERT_EQ(wire[x.size() + b], exp + 127) << "block " << b;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(wire[i], want[i]) << "exp " << exp << " element " << i << " value " << x[i];
      ASSERT_TRUE(same_bits(back[i], x[i])) << "exp " << exp << " element " << i << ": " << back[i] << " vs " << x[i];
    }
  }
}

TEST_P(Mxfp8Formats, MatchesScalarReferenceBitwise) {
  const Format f = format();
  for (size_t n : {size_t{1}, size_t{5}, size_t{31}, size_t{32}, size_t{33}, size_t{64}, size_t{95}, size_t{1000},
                   size_t{4133}}) {
    const auto x = random_values(n, static_cast<uint32_t>(n));
    const auto want = reference_quantize(x, f);
    const auto got = quantize_f32(x, f);
    ASSERT_EQ(got, want) << "n " << n;
    const auto back = dequantize_f32(got, n, f.element);
    const auto ref_back = reference_dequantize(want, n, f.element);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(back[i], ref_back[i])) << "n " << n << " element " << i;

    // bf16 input: the same as quantising its exact f32 widening; bf16 output rounds the f32 decode once.
    std::vector<uint16_t> xb(n);
    std::vector<float> xw(n);
    for (size_t i = 0; i < n; ++i) {
      xb[i] = float_to_bf16(x[i]);
      xw[i] = bf16_to_float(xb[i]);
    }
    std::vector<uint8_t> wb(wire_bytes(n));
    quantize(xb.data(), DataType::kBfloat16, n, wb.data(), f);
    ASSERT_EQ(wb, reference_quantize(xw, f)) << "bf16 n " << n;
    std::vector<uint16_t> out(n);
    dequantize(wb.data(), n, f.element, out.data(), DataType::kBfloat16);
    const auto wb_back = reference_dequantize(wb, n, f.element);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], float_to_bf16(wb_back[i])) << "bf16 n " << n << " element " << i;
  }
}

// |decoded - x| <= 2^-(mantissa bits + 1) * max(|x|, smallest element normal * scale): relative error
// 2^-4 (E4M3) / 2^-3 (E5M2) for elements in the element's normal range, half a subnormal step below it.
TEST_P(Mxfp8Formats, WorstErrorOfInRangeElementsIsBounded) {
  const Format f = format();
  const size_t n = 32 * 2000 + 7;
  const auto x = random_values(n, 12345);
  const auto wire = quantize_f32(x, f);
  const auto back = dequantize_f32(wire, n, f.element);
  const double bound = std::ldexp(1.0, -(mant_bits(f.element) + 1));
  double worst = 0, worst_normal = 0;
  for (size_t i = 0; i < n; ++i) {
    const double scale = std::ldexp(1.0, int{wire[n + i / kBlockSize]} - 127);
    const double ax = std::fabs(double{x[i]});
    if (ax > max_of(f.element) * scale) continue;  // saturated under floor rounding: not in range
    const double floor_of_range = std::ldexp(scale, emin_of(f.element));
    const double err = std::fabs(double{back[i]} - double{x[i]});
    worst = std::max(worst, err / std::max(ax, floor_of_range));
    if (ax >= floor_of_range) worst_normal = std::max(worst_normal, err / ax);
  }
  EXPECT_LE(worst, bound);
  EXPECT_LE(worst_normal, bound);
  EXPECT_GT(worst_normal, bound / 2);  // the bound is tight: the random data does reach near it
}

TEST_P(Mxfp8Formats, TailBlocksTakeTheirOwnScale) {
  const Format f = format();
  for (size_t n : {size_t{1}, size_t{33}, size_t{40}, size_t{63}}) {
    std::vector<float> x(n, 1000.0f);
    for (size_t i = (block_count(n) - 1) * kBlockSize; i < n; ++i) x[i] = 0.25f;  // the last (partial) block
    const auto wire = quantize_f32(x, f);
    ASSERT_EQ(wire.size(), n + block_count(n));
    EXPECT_EQ(wire[n + block_count(n) - 1], reference_scale_exp(0.25f, f) + 127) << "n " << n;
    const auto back = dequantize_f32(wire, n, f.element);
    EXPECT_EQ(back[n - 1], 0.25f) << "n " << n;
  }
}

TEST_P(Mxfp8Formats, NanPoisonsOnlyItsBlock) {
  const Format f = format();
  std::vector<float> x(96, 3.0f);
  x[40] = std::numeric_limits<float>::quiet_NaN();
  const auto wire = quantize_f32(x, f);
  EXPECT_EQ(wire[96 + 1], kScaleNaN);
  const auto back = dequantize_f32(wire, 96, f.element);
  for (size_t i = 0; i < 96; ++i) {
    if (i / 32 == 1) {
      EXPECT_TRUE(std::isnan(back[i])) << i;
    } else {
      EXPECT_EQ(back[i], 3.0f) << i;
    }
  }
}

TEST_P(Mxfp8Formats, InfinityKeepsTheFiniteScale) {
  const Format f = format();
  std::vector<float> x(32, 2.0f);
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = -std::numeric_limits<float>::infinity();
  const auto wire = quantize_f32(x, f);
  EXPECT_EQ(wire[32], reference_scale_exp(2.0f, f) + 127);
  const auto back = dequantize_f32(wire, 32, f.element);
  if (f.element == kE5) {
    EXPECT_EQ(back[3], std::numeric_limits<float>::infinity());
    EXPECT_EQ(back[4], -std::numeric_limits<float>::infinity());
  } else {  // E4M3 has no infinity: NaN, as PyTorch's cast
    EXPECT_TRUE(std::isnan(back[3]));
    EXPECT_TRUE(std::isnan(back[4]));
  }
  EXPECT_EQ(back[0], 2.0f);
  EXPECT_EQ(back[31], 2.0f);
}

// Every code of the element format, at scales 1 and 2^-127 (a subnormal f32 product) and the NaN scale,
// decodes as common/float_formats' table decode times the scale (NaN wherever that is NaN).
TEST_P(Mxfp8Formats, EveryCodeDecodesAsTheTable) {
  const Format f = format();
  for (uint8_t scale : {uint8_t{127}, uint8_t{0}, uint8_t{200}, kScaleNaN}) {
    std::vector<uint8_t> wire(256 + block_count(256), scale);
    for (int c = 0; c < 256; ++c) wire[c] = static_cast<uint8_t>(c);
    const auto back = dequantize_f32(wire, 256, f.element);
    for (int c = 0; c < 256; ++c) {
      const float want = from_code(f.element, static_cast<uint8_t>(c)) * scale_to_float(scale);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(back[c])) << "code " << c << " scale " << int{scale};
      } else {
        EXPECT_TRUE(same_bits(back[c], want)) << "code " << c << " scale " << int{scale} << ": " << back[c];
      }
    }
  }
}

// dequantize_range (parts of an encoding, starting and ending inside blocks; f32, bf16, and f32 rounded
// through bf16) and dequantize_add equal the whole decode, bit for bit.
TEST_P(Mxfp8Formats, RangesAndDecodeAddMatchTheWholeDecode) {
  const Format f = format();
  const size_t n = 32 * 40 + 13;
  const auto x = random_values(n, 99);
  const auto wire = quantize_f32(x, f);
  const auto whole = reference_dequantize(wire, n, f.element);
  std::mt19937 rng(7);
  for (int k = 0; k < 200; ++k) {
    const size_t first = rng() % (n + 1), len = rng() % (n - first + 1);
    std::vector<float> f32(len), via(len);
    std::vector<uint16_t> b16(len);
    dequantize_range(wire.data(), n, first, len, f.element, f32.data(), DataType::kFloat32, DataType::kFloat32);
    dequantize_range(wire.data(), n, first, len, f.element, via.data(), DataType::kFloat32, DataType::kBfloat16);
    dequantize_range(wire.data(), n, first, len, f.element, b16.data(), DataType::kBfloat16, DataType::kBfloat16);
    for (size_t i = 0; i < len; ++i) {
      const float want = whole[first + i];
      ASSERT_TRUE(same_bits(f32[i], want)) << "[" << first << ", +" << len << ") element " << i;
      ASSERT_EQ(b16[i], float_to_bf16(want)) << "[" << first << ", +" << len << ") element " << i;
      ASSERT_TRUE(same_bits(via[i], bf16_to_float(float_to_bf16(want)))) << "[" << first << ", +" << len << ") " << i;
    }
  }
  std::vector<float> acc(n), want(n);
  for (size_t i = 0; i < n; ++i) acc[i] = want[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, -3);
  for (size_t i = 0; i < n; ++i) want[i] += whole[i];
  dequantize_add(wire.data(), n, f.element, acc.data());
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(acc[i], want[i])) << "element " << i;
}

TEST(Mxfp8Spec, ScaleCodes) {
  EXPECT_EQ(scale_to_float(127), 1.0f);
  EXPECT_EQ(scale_to_float(0), std::ldexp(1.0f, -127));  // 0x00 is 2^-127, not zero
  EXPECT_EQ(scale_to_float(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(scale_to_float(0xFF)));
}

TEST(Mxfp8Spec, ElementEdgeValues) {
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);  // S.1111.110: max normal
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));  // S.1111.111: NaN, no infinity
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);  // S.11110.11: max normal
  EXPECT_EQ(e5m2_to_float(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(e5m2_to_float(0x7D)));
  EXPECT_EQ(e5m2_to_float(0x01), std::ldexp(1.0f, -16));
}

TEST(Mxfp8Spec, ScaleChoice) {
  const Format e4{kE4, ScaleRounding::kCeil}, e4f{kE4, ScaleRounding::kFloor};
  const Format e5{kE5, ScaleRounding::kCeil}, e5f{kE5, ScaleRounding::kFloor};
  EXPECT_EQ(choose_scale(0.0f, e4), 127);  // all zero: scale 1 (2^-127 would decode through a subnormal)
  EXPECT_EQ(choose_scale(448.0f, e4), 127);        // exactly the max: scale 1
  EXPECT_EQ(choose_scale(448.5f, e4), 128);        // past it: the next power of two, never saturating
  EXPECT_EQ(choose_scale(448.5f, e4f), 127);       // the spec's floor: 2^(8 - 8), saturates to 448
  EXPECT_EQ(choose_scale(511.0f, e4f), 127);
  EXPECT_EQ(choose_scale(1.0f, e4), 127 - 8);
  EXPECT_EQ(choose_scale(1.0f, e5), 127 - 15);
  EXPECT_EQ(choose_scale(57344.0f, e5), 127);
  EXPECT_EQ(choose_scale(60000.0f, e5), 128);
  EXPECT_EQ(choose_scale(60000.0f, e5f), 127);
  EXPECT_EQ(choose_scale(std::numeric_limits<float>::max(), e4), 127 + 128 - 8);
  EXPECT_EQ(choose_scale(std::numeric_limits<float>::denorm_min(), e4), 0);  // clamped to 2^-127

  std::vector<float> x(32, 511.0f);
  const auto wire = quantize_f32(x, e4f);
  EXPECT_EQ(dequantize_f32(wire, 32, kE4)[0], 448.0f);  // floor rounding saturates
  EXPECT_EQ(dequantize_f32(quantize_f32(x, e4), 32, kE4)[0], 512.0f);  // ceil: 511 rounds to 256 * 2
}

TEST(Mxfp8Spec, ParseAndBadTypes) {
  EXPECT_EQ(parse_format("mxfp8")->element, kE4);
  EXPECT_EQ(parse_format("mxfp8_e5m2")->element, kE5);
  EXPECT_FALSE(parse_format("bf16").has_value());
  std::vector<int32_t> ints(4);
  std::vector<uint8_t> wire(wire_bytes(4));
  EXPECT_THROW(quantize(ints.data(), DataType::kInt32, 4, wire.data(), Format{}), std::invalid_argument);
  EXPECT_THROW(quantize(ints.data(), DataType::kFloat32, 4, wire.data(), Format{DataType::kFloat16}),
               std::invalid_argument);
  std::vector<uint16_t> b16(4);
  EXPECT_THROW(dequantize_range(wire.data(), 4, 2, 3, kE4, b16.data(), DataType::kBfloat16, DataType::kBfloat16),
               std::invalid_argument);  // past the end
  EXPECT_THROW(dequantize_range(wire.data(), 4, 0, 4, kE4, b16.data(), DataType::kBfloat16, DataType::kFloat32),
               std::invalid_argument);  // f32 precision in bf16 output
}

TEST(Mxfp8Spec, InstructionSets) {
  EXPECT_TRUE(isa_supported(Isa::kBaseline));
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_EQ(active_isa(), best_isa());
  for (Isa isa : kIsas) {
    if (!isa_supported(isa)) {
      EXPECT_THROW(use_isa(isa), std::invalid_argument) << isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace fsdp::mx
