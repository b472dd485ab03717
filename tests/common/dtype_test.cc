// Data types (common/dtype.h) and the narrow float formats (common/float_formats.h): sizes, names, parsing,
// and every code of half, bf16, e4m3 and e5m2 against a reference written from the format definitions.
#include "common/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/float_formats.h"

namespace fsdp {
namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// ---------------------------------------------------------------------------------------------------------------
// Data types

TEST(DataTypeTest, SizesNamesAndParsing) {
  const std::vector<std::pair<DataType, size_t>> sizes = {
      {DataType::kInt8, 1},    {DataType::kUint8, 1},    {DataType::kInt32, 4},      {DataType::kUint32, 4},
      {DataType::kInt64, 8},   {DataType::kUint64, 8},   {DataType::kFloat16, 2},    {DataType::kFloat32, 4},
      {DataType::kFloat64, 8}, {DataType::kBfloat16, 2}, {DataType::kFloat8E4M3, 1}, {DataType::kFloat8E5M2, 1},
  };
  ASSERT_EQ(sizes.size(), static_cast<size_t>(kNumDataTypes));
  for (const auto& [t, size] : sizes) {
    EXPECT_TRUE(is_valid(t));
    EXPECT_EQ(element_size(t), size) << name(t);
    EXPECT_EQ(parse_data_type(name(t)), t) << name(t);
  }
  EXPECT_EQ(name(DataType::kFloat16), "half");
  EXPECT_EQ(name(DataType::kFloat32), "float");
  EXPECT_EQ(name(DataType::kFloat64), "double");
  EXPECT_EQ(name(DataType::kBfloat16), "bfloat16");
  EXPECT_EQ(name(DataType::kFloat8E4M3), "fp8_e4m3");
  EXPECT_EQ(name(DataType::kFloat8E5M2), "fp8_e5m2");
  EXPECT_EQ(name(DataType::kUint64), "uint64");
}

TEST(DataTypeTest, Aliases) {
  EXPECT_EQ(parse_data_type("f32"), DataType::kFloat32);
  EXPECT_EQ(parse_data_type("float32"), DataType::kFloat32);
  EXPECT_EQ(parse_data_type("FLOAT"), DataType::kFloat32);
  EXPECT_EQ(parse_data_type("f64"), DataType::kFloat64);
  EXPECT_EQ(parse_data_type("float64"), DataType::kFloat64);
  EXPECT_EQ(parse_data_type("f16"), DataType::kFloat16);
  EXPECT_EQ(parse_data_type("float16"), DataType::kFloat16);
  EXPECT_EQ(parse_data_type("fp16"), DataType::kFloat16);
  EXPECT_EQ(parse_data_type("bf16"), DataType::kBfloat16);
  EXPECT_EQ(parse_data_type("e4m3"), DataType::kFloat8E4M3);
  EXPECT_EQ(parse_data_type("float8_e4m3fn"), DataType::kFloat8E4M3);
  EXPECT_EQ(parse_data_type("e5m2"), DataType::kFloat8E5M2);
  EXPECT_EQ(parse_data_type("f8e5m2"), DataType::kFloat8E5M2);
  EXPECT_EQ(parse_data_type("i8"), DataType::kInt8);
  EXPECT_EQ(parse_data_type("u8"), DataType::kUint8);
  EXPECT_EQ(parse_data_type("i32"), DataType::kInt32);
  EXPECT_EQ(parse_data_type("u64"), DataType::kUint64);
  EXPECT_EQ(parse_data_type(""), std::nullopt);
  EXPECT_EQ(parse_data_type("float 32"), std::nullopt);
  EXPECT_EQ(parse_data_type("int16"), std::nullopt);
  EXPECT_EQ(parse_data_type("fp8"), std::nullopt);
}

TEST(DataTypeTest, InvalidValues) {
  for (int v : {-1, kNumDataTypes, 99}) {
    const auto t = static_cast<DataType>(v);
    EXPECT_FALSE(is_valid(t));
    EXPECT_EQ(element_size(t), 0u);
    EXPECT_FALSE(is_floating(t));
  }
}

TEST(DataTypeTest, FloatingAndAccumulation) {
  for (int v = 0; v < kNumDataTypes; ++v) {
    const auto t = static_cast<DataType>(v);
    const bool promoted =
        t == DataType::kFloat16 || t == DataType::kBfloat16 || t == DataType::kFloat8E4M3 || t == DataType::kFloat8E5M2;
    EXPECT_EQ(accumulate_type(t), promoted ? DataType::kFloat32 : t) << name(t);
    EXPECT_EQ(needs_promotion(t), promoted) << name(t);
    EXPECT_EQ(is_floating(t), promoted || t == DataType::kFloat32 || t == DataType::kFloat64) << name(t);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Float formats. The reference below is written from the format definitions alone (value = significand * 2^exp in
// double, nearest code by exhaustive table search) so it shares no code with the bit manipulation under test.

struct Format {
  const char* label;
  int exp_bits;
  int mant_bits;
  int bias;
  bool fn_nan;  // e4m3fn: no infinities, only the all-ones pattern is NaN
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);
};

int total_bits(const Format& f) { return 1 + f.exp_bits + f.mant_bits; }
uint32_t sign_bit(const Format& f) { return uint32_t{1} << (f.exp_bits + f.mant_bits); }
uint32_t magnitude_mask(const Format& f) { return sign_bit(f) - 1; }

bool code_is_nan(const Format& f, uint32_t code) {
  const uint32_t mag = code & magnitude_mask(f);
  if (f.fn_nan) return mag == magnitude_mask(f);
  const uint32_t exp = mag >> f.mant_bits;
  return exp == (uint32_t{1} << f.exp_bits) - 1 && (mag & ((uint32_t{1} << f.mant_bits) - 1)) != 0;
}

bool code_is_inf(const Format& f, uint32_t code) {
  if (f.fn_nan) return false;
  return (code & magnitude_mask(f)) == (((uint32_t{1} << f.exp_bits) - 1) << f.mant_bits);
}

// Value of a finite non-negative code straight from the definition.
double reference_value(const Format& f, uint32_t mag) {
  const int exp = static_cast<int>(mag >> f.mant_bits);
  const double mant = static_cast<double>(mag & ((uint32_t{1} << f.mant_bits) - 1));
  const double frac = mant / static_cast<double>(uint32_t{1} << f.mant_bits);
  if (exp == 0) return std::ldexp(frac, 1 - f.bias);
  return std::ldexp(1.0 + frac, exp - f.bias);
}

// Values of non-negative codes 0..max_finite, then one virtual code past it whose value is max + ulp: that is
// where rounding lands on overflow (inf for IEEE-like formats, NaN for e4m3fn), and its parity settles the tie.
std::vector<double> reference_table(const Format& f) {
  std::vector<double> values;
  for (uint32_t mag = 0; mag <= magnitude_mask(f); ++mag) {
    if (code_is_nan(f, mag) || code_is_inf(f, mag)) break;
    values.push_back(reference_value(f, mag));
  }
  const size_t n = values.size();
  values.push_back(values[n - 1] + (values[n - 1] - values[n - 2]));
  return values;
}

uint32_t reference_encode(const Format& f, const std::vector<double>& table, float x) {
  const uint32_t sign = std::signbit(x) ? sign_bit(f) : 0;
  const double a = std::fabs(static_cast<double>(x));
  const uint32_t overflow = static_cast<uint32_t>(table.size() - 1);
  if (a >= table.back()) return sign | overflow;
  const size_t hi = static_cast<size_t>(std::upper_bound(table.begin(), table.end(), a) - table.begin());
  const size_t lo = hi - 1;
  if (table[lo] == a) return sign | static_cast<uint32_t>(lo);
  const double mid = (table[lo] + table[hi]) / 2;  // exact: neighbours differ by one ulp of a short format
  size_t pick = a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | static_cast<uint32_t>(pick);
}

const Format kHalf{"half",
                   5,
                   10,
                   15,
                   false,
                   [](uint32_t c) { return half_to_float(static_cast<uint16_t>(c)); },
                   [](float f) -> uint32_t { return float_to_half(f); }};
const Format kBf16{"bf16",
                   8,
                   7,
                   127,
                   false,
                   [](uint32_t c) { return bf16_to_float(static_cast<uint16_t>(c)); },
                   [](float f) -> uint32_t { return float_to_bf16(f); }};
const Format kE4m3{"e4m3",
                   4,
                   3,
                   7,
                   true,
                   [](uint32_t c) { return e4m3_to_float(static_cast<uint8_t>(c)); },
                   [](float f) -> uint32_t { return float_to_e4m3(f); }};
const Format kE5m2{"e5m2",
                   5,
                   2,
                   15,
                   false,
                   [](uint32_t c) { return e5m2_to_float(static_cast<uint8_t>(c)); },
                   [](float f) -> uint32_t { return float_to_e5m2(f); }};
const Format* const kFormats[] = {&kHalf, &kBf16, &kE4m3, &kE5m2};

// Every code decodes to the value its definition gives, and encodes back to itself (NaN only to some NaN).
TEST(FloatFormatsTest, ExhaustiveDecodeAndRoundTrip) {
  for (const Format* f : kFormats) {
    const uint32_t count = uint32_t{1} << total_bits(*f);
    for (uint32_t code = 0; code < count; ++code) {
      const float v = f->decode(code);
      const bool negative = (code & sign_bit(*f)) != 0;
      ASSERT_EQ(std::signbit(v), negative) << f->label << " code " << code;
      if (code_is_nan(*f, code)) {
        ASSERT_TRUE(std::isnan(v)) << f->label << " code " << code;
        const uint32_t back = f->encode(v);
        ASSERT_TRUE(code_is_nan(*f, back)) << f->label << " code " << code << " -> " << back;
        ASSERT_EQ((back & sign_bit(*f)) != 0, negative) << f->label << " code " << code;
        continue;
      }
      if (code_is_inf(*f, code)) {
        ASSERT_TRUE(std::isinf(v)) << f->label << " code " << code;
      } else {
        const double expected = reference_value(*f, code & magnitude_mask(*f));
        ASSERT_EQ(static_cast<double>(v), negative ? -expected : expected) << f->label << " code " << code;
      }
      ASSERT_EQ(f->encode(v), code) << f->label << " code " << code;
    }
  }
}

// Quiet NaNs of the 16-bit formats keep their exact bits through f32.
TEST(FloatFormatsTest, QuietNanBitsSurvive) {
  for (uint32_t h = 0x7e00; h <= 0x7fff; ++h) {
    ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h);
    ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h | 0x8000))), h | 0x8000);
  }
  for (uint32_t b = 0x7fc0; b <= 0x7fff; ++b) ASSERT_EQ(float_to_bf16(bf16_to_float(static_cast<uint16_t>(b))), b);
  // Signalling NaNs come back quiet, never as infinity (bf16 rounding could otherwise carry into the exponent).
  EXPECT_EQ(float_to_bf16(float_of(0x7f800001)), 0x7fc0);
  EXPECT_EQ(float_to_bf16(float_of(0x7fbfffff)), 0x7fff);
  EXPECT_EQ(float_to_half(float_of(0x7f800001)), 0x7e00);
}

// f32 -> narrow against the reference at every code, every midpoint and their f32 neighbours, plus a sweep of
// the whole f32 range.
TEST(FloatFormatsTest, EncodeMatchesReferenceRounding) {
  for (const Format* f : kFormats) {
    const std::vector<double> table = reference_table(*f);
    std::vector<float> probes;
    auto add_with_neighbours = [&](double d) {
      const float x = static_cast<float>(d);
      if (static_cast<double>(x) != d) return;  // only exact points; neighbours of inexact ones are covered anyway
      for (float p : {x, std::nextafter(x, 0.0f), std::nextafter(x, std::numeric_limits<float>::infinity())}) {
        probes.push_back(p);
        probes.push_back(-p);
      }
    };
    for (size_t i = 0; i + 1 < table.size(); ++i) {
      add_with_neighbours(table[i]);
      add_with_neighbours((table[i] + table[i + 1]) / 2);
    }
    add_with_neighbours(table.back());
    for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 16411) probes.push_back(float_of(static_cast<uint32_t>(u)));
    probes.push_back(std::numeric_limits<float>::infinity());
    probes.push_back(-std::numeric_limits<float>::infinity());
    probes.push_back(std::numeric_limits<float>::max());
    probes.push_back(std::numeric_limits<float>::denorm_min());
    for (float x : probes) {
      if (std::isnan(x)) {
        const uint32_t got = f->encode(x);
        ASSERT_TRUE(code_is_nan(*f, got)) << f->label << " " << bits_of(x);
        ASSERT_EQ((got & sign_bit(*f)) != 0, std::signbit(x)) << f->label;
        continue;
      }
      ASSERT_EQ(f->encode(x), reference_encode(*f, table, x)) << f->label << " x=" << x << " bits=" << bits_of(x);
    }
  }
}

TEST(FloatFormatsTest, KnownHalfValues) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(half_to_float(0x03ff), 1023 * 0x1p-24f);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  // Ties to even.
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_half(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(float_to_half(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  // Subnormal rounding up into the smallest normal.
  EXPECT_EQ(float_to_half(0x1p-14f - 0x1p-26f), 0x0400);
  // Overflow: 65520 is the tie with 2^16 and goes to infinity.
  EXPECT_EQ(float_to_half(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
}

TEST(FloatFormatsTest, KnownBf16Values) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16_to_float(0x0001), 0x1p-133f);  // smallest subnormal
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest bf16
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

TEST(FloatFormatsTest, KnownE4m3Values) {
  EXPECT_EQ(float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3(-2.0f), 0xc0);
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  EXPECT_EQ(float_to_e4m3(0x1p-9f), 0x01);
  EXPECT_EQ(float_to_e4m3(0x1p-10f), 0x00);  // tie with zero
  EXPECT_EQ(float_to_e4m3(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(float_to_e4m3(1.0f + 0x1p-4f), 0x38);
  EXPECT_EQ(float_to_e4m3(1.0f + 3 * 0x1p-4f), 0x3a);
  // The step past 448 would be 480, whose pattern is NaN. 464 is the exact midpoint: 448 has the even
  // mantissa, so it wins the tie; anything above 464 overflows to NaN (PyTorch's float8_e4m3fn cast agrees).
  EXPECT_EQ(float_to_e4m3(460.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(std::nextafter(464.0f, 0.0f)), 0x7e);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-464.0f), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::nextafter(464.0f, 1e9f)), 0x7f);
  EXPECT_EQ(float_to_e4m3(480.0f), 0x7f);
  EXPECT_EQ(float_to_e4m3(-1e6f), 0xff);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7f);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xff);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

TEST(FloatFormatsTest, KnownE5m2Values) {
  EXPECT_EQ(float_to_e5m2(1.0f), 0x3c);
  EXPECT_EQ(float_to_e5m2(-2.0f), 0xc0);
  EXPECT_EQ(float_to_e5m2(57344.0f), 0x7b);
  EXPECT_EQ(e5m2_to_float(0x7b), 57344.0f);
  EXPECT_EQ(e5m2_to_float(0x01), 0x1p-16f);
  EXPECT_EQ(e5m2_to_float(0x04), 0x1p-14f);
  EXPECT_TRUE(std::isinf(e5m2_to_float(0x7c)));
  EXPECT_TRUE(std::isnan(e5m2_to_float(0x7d)));
  EXPECT_EQ(float_to_e5m2(1.0f + 0x1p-3f), 0x3c);
  EXPECT_EQ(float_to_e5m2(1.0f + 3 * 0x1p-3f), 0x3e);
  EXPECT_EQ(float_to_e5m2(0x1p-17f), 0x00);
  EXPECT_EQ(float_to_e5m2(3 * 0x1p-17f), 0x02);
  // 61440 is the midpoint between 57344 (odd mantissa) and 2^16, so the tie goes to infinity.
  EXPECT_EQ(float_to_e5m2(std::nextafter(61440.0f, 0.0f)), 0x7b);
  EXPECT_EQ(float_to_e5m2(61440.0f), 0x7c);
  EXPECT_EQ(float_to_e5m2(-1e6f), 0xfc);
  EXPECT_EQ(float_to_e5m2(std::numeric_limits<float>::infinity()), 0x7c);
  EXPECT_TRUE(std::isnan(e5m2_to_float(float_to_e5m2(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace fsdp
