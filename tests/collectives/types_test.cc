#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/float_formats.h"
#include "collectives/kernels/reduce_kernels.h"
#include "collectives/types/reduce_op.h"
#include "collectives/kernels/stream_copy.h"

namespace fsdp {
namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }
bool same_bits(float a, float b) { return bits_of(a) == bits_of(b); }

// ---------------------------------------------------------------------------------------------------------------
// Reduce ops

TEST(ReduceOpTest, NamesAndValidity) {
  EXPECT_EQ(name(ReduceKind::kSum), "sum");
  EXPECT_EQ(name(ReduceKind::kProd), "prod");
  EXPECT_EQ(name(ReduceKind::kMax), "max");
  EXPECT_EQ(name(ReduceKind::kMin), "min");
  EXPECT_EQ(name(ReduceKind::kAvg), "avg");
  EXPECT_EQ(name(ReduceKind::kPremulSum), "premulsum");
  for (int v = 0; v < kNumReduceKinds; ++v) EXPECT_TRUE(is_valid(static_cast<ReduceKind>(v)));
  EXPECT_FALSE(is_valid(static_cast<ReduceKind>(-1)));
  EXPECT_FALSE(is_valid(static_cast<ReduceKind>(kNumReduceKinds)));
  EXPECT_EQ(ReduceOp::premul_sum(0.5), (ReduceOp{ReduceKind::kPremulSum, 0.5}));
}

// ---------------------------------------------------------------------------------------------------------------
// Reduction kernels against naive loops written independently of the kernels' helpers.

template <typename T>
T naive(ReduceKind op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Arithmetic modulo 2^64 narrowed to T is arithmetic modulo 2^bits (C++20 defines the narrowing).
    const uint64_t x = static_cast<uint64_t>(a), y = static_cast<uint64_t>(b);
    switch (op) {
      case ReduceKind::kSum: return static_cast<T>(x + y);
      case ReduceKind::kProd: return static_cast<T>(x * y);
      default: break;
    }
  } else {
    switch (op) {
      case ReduceKind::kSum: return a + b;
      case ReduceKind::kProd: return a * b;
      default: break;
    }
  }
  return op == ReduceKind::kMax ? (a > b ? a : b) : (a < b ? a : b);
}

template <typename T>
bool equivalent(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) && std::isnan(b)) return true;  // which NaN payload wins is not specified for sum/prod
    return std::memcmp(&a, &b, sizeof(T)) == 0;
  } else {
    return a == b;
  }
}

template <typename T>
std::vector<T> random_values(std::mt19937_64& rng, size_t n) {
  std::vector<T> v(n);
  if constexpr (std::is_integral_v<T>) {
    for (auto& x : v) x = static_cast<T>(rng());  // full range, so sums and products wrap
  } else {
    std::uniform_real_distribution<T> dist(-4, 4);
    const T specials[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                          -std::numeric_limits<T>::infinity(), T(0), -T(0)};
    for (size_t i = 0; i < n; ++i) v[i] = (rng() % 16 == 0) ? specials[rng() % 5] : dist(rng);
  }
  return v;
}

constexpr ReduceKind kKernelOps[] = {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax, ReduceKind::kMin};

template <typename T>
void check_kernels(DataType t) {
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1031}}) {
    for (ReduceKind op : kKernelOps) {
      SCOPED_TRACE(std::string(name(t)) + " " + std::string(name(op)) + " n=" + std::to_string(n));
      // One element of leading padding so the kernels see unaligned pointers too.
      const std::vector<T> a = random_values<T>(rng, n + 1);
      const std::vector<T> b = random_values<T>(rng, n + 1);
      std::vector<T> expected(n + 1);
      for (size_t i = 1; i <= n; ++i) expected[i] = naive(op, a[i], b[i]);
      auto check = [&](const std::vector<T>& got, const char* what) {
        for (size_t i = 1; i <= n; ++i) {
          ASSERT_TRUE(equivalent(got[i], expected[i])) << what << " at " << i << ": " << +got[i] << " vs "
                                                       << +expected[i];
        }
      };

      std::vector<T> into = a;
      reduce_into(into.data() + 1, b.data() + 1, n, t, op);
      check(into, "reduce_into");

      std::vector<T> out(n + 1);
      reduce_pair(out.data() + 1, a.data() + 1, b.data() + 1, n, t, op);
      check(out, "reduce_pair");

      std::vector<T> alias_a = a;
      reduce_pair(alias_a.data() + 1, alias_a.data() + 1, b.data() + 1, n, t, op);
      check(alias_a, "reduce_pair dst==a");

      std::vector<T> alias_b = b;
      reduce_pair(alias_b.data() + 1, a.data() + 1, alias_b.data() + 1, n, t, op);
      check(alias_b, "reduce_pair dst==b");

      std::vector<T> self = a;
      reduce_pair(self.data() + 1, self.data() + 1, self.data() + 1, n, t, op);
      for (size_t i = 1; i <= n; ++i) ASSERT_TRUE(equivalent(self[i], naive(op, a[i], a[i]))) << "self at " << i;
    }
  }
}

TEST(ReduceKernelsTest, EveryNativeTypeAndOpMatchesNaiveLoop) {
  check_kernels<int8_t>(DataType::kInt8);
  check_kernels<uint8_t>(DataType::kUint8);
  check_kernels<int32_t>(DataType::kInt32);
  check_kernels<uint32_t>(DataType::kUint32);
  check_kernels<int64_t>(DataType::kInt64);
  check_kernels<uint64_t>(DataType::kUint64);
  check_kernels<float>(DataType::kFloat32);
  check_kernels<double>(DataType::kFloat64);
}

// max/min are plain comparisons: the second operand wins when the first is NaN and vice versa, and operand order
// is kept whichever buffer the output aliases.
TEST(ReduceKernelsTest, MaxMinNanFollowsOperandOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float a[2] = {nan, 1.0f};
  const float b[2] = {1.0f, nan};
  float out[2];
  reduce_pair(out, a, b, 2, DataType::kFloat32, ReduceKind::kMax);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_TRUE(std::isnan(out[1]));
  float b_alias[2] = {1.0f, nan};
  reduce_pair(b_alias, a, b_alias, 2, DataType::kFloat32, ReduceKind::kMin);
  EXPECT_EQ(b_alias[0], 1.0f);
  EXPECT_TRUE(std::isnan(b_alias[1]));
}

template <typename T>
T reduce_one(DataType t, ReduceKind op, T a, T b) {
  reduce_into(&a, &b, 1, t, op);
  return a;
}

TEST(ReduceKernelsTest, IntegerWrapAround) {
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, ReduceKind::kSum, 127, 1), -128);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, ReduceKind::kSum, -128, -1), 127);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, ReduceKind::kProd, 16, 16), 0);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, ReduceKind::kProd, -128, -1), -128);
  EXPECT_EQ(reduce_one<uint8_t>(DataType::kUint8, ReduceKind::kSum, 200, 100), 44);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, ReduceKind::kSum, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, ReduceKind::kProd, 65536, 65536), 0);
  EXPECT_EQ(reduce_one<uint32_t>(DataType::kUint32, ReduceKind::kSum, UINT32_MAX, 2), 1u);
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, ReduceKind::kSum, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, ReduceKind::kProd, INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(reduce_one<uint64_t>(DataType::kUint64, ReduceKind::kSum, UINT64_MAX, 1), 0u);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, ReduceKind::kMax, -5, 3), 3);
  EXPECT_EQ(reduce_one<uint32_t>(DataType::kUint32, ReduceKind::kMin, 7, UINT32_MAX), 7u);
}

TEST(ReduceKernelsTest, RejectsNonNativeTypesAndOps) {
  float x[4] = {}, y[4] = {};
  auto message_of = [](const std::function<void()>& fn) -> std::string {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "<no exception>";
  };
  const std::string bf16_sum = message_of([&] { reduce_into(x, y, 4, DataType::kBfloat16, ReduceKind::kSum); });
  EXPECT_NE(bf16_sum.find("bfloat16"), std::string::npos) << bf16_sum;
  EXPECT_NE(bf16_sum.find("sum"), std::string::npos) << bf16_sum;
  const std::string avg = message_of([&] { reduce_pair(x, x, y, 4, DataType::kFloat32, ReduceKind::kAvg); });
  EXPECT_NE(avg.find("float"), std::string::npos) << avg;
  EXPECT_NE(avg.find("avg"), std::string::npos) << avg;
  for (DataType t : {DataType::kFloat16, DataType::kBfloat16, DataType::kFloat8E4M3, DataType::kFloat8E5M2,
                     static_cast<DataType>(99), static_cast<DataType>(-1)}) {
    EXPECT_THROW(reduce_into(x, y, 4, t, ReduceKind::kMax), std::invalid_argument) << static_cast<int>(t);
    EXPECT_THROW(reduce_pair(x, x, y, 4, t, ReduceKind::kMax), std::invalid_argument) << static_cast<int>(t);
  }
  for (ReduceKind op : {ReduceKind::kAvg, ReduceKind::kPremulSum, static_cast<ReduceKind>(42)}) {
    EXPECT_THROW(reduce_into(x, y, 4, DataType::kFloat32, op), std::invalid_argument);
    EXPECT_THROW(reduce_pair(x, x, y, 4, DataType::kInt32, op), std::invalid_argument);
  }
  // Validation happens even for empty buffers.
  EXPECT_THROW(reduce_into(nullptr, nullptr, 0, DataType::kFloat16, ReduceKind::kSum), std::invalid_argument);
  EXPECT_THROW(narrow_from_f32(x, y, 4, DataType::kInt32), std::invalid_argument);
  EXPECT_THROW(narrow_from_f32(x, y, 4, DataType::kFloat64), std::invalid_argument);
  EXPECT_THROW(widen_to_f32(x, y, 4, static_cast<DataType>(99), 1.0), std::invalid_argument);
  EXPECT_THROW(scale_in_place(x, 4, static_cast<DataType>(99), 2.0), std::invalid_argument);
  EXPECT_THROW(scale_copy(x, y, 4, static_cast<DataType>(99), 2.0), std::invalid_argument);
  EXPECT_THROW(divide_in_place(x, 4, static_cast<DataType>(99), 2), std::invalid_argument);
  int32_t ints[2] = {1, 2};
  EXPECT_THROW(divide_in_place(ints, 2, DataType::kInt32, 0), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------------------------
// Scaling, division, widening and narrowing.

TEST(ScaleTest, FloatsMultiplyInTheirOwnPrecision) {
  std::mt19937_64 rng(11);
  const std::vector<float> f = random_values<float>(rng, 103);
  std::vector<float> in_place = f, copy(f.size());
  scale_in_place(in_place.data(), f.size(), DataType::kFloat32, 0.1);
  scale_copy(copy.data(), f.data(), f.size(), DataType::kFloat32, 0.1);
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_TRUE(equivalent(in_place[i], f[i] * 0.1f)) << i;
    ASSERT_TRUE(equivalent(copy[i], f[i] * 0.1f)) << i;
  }
  const std::vector<double> d = random_values<double>(rng, 103);
  std::vector<double> d_scaled = d;
  scale_in_place(d_scaled.data(), d.size(), DataType::kFloat64, 0.1);
  for (size_t i = 0; i < d.size(); ++i) ASSERT_TRUE(equivalent(d_scaled[i], d[i] * 0.1)) << i;
}

TEST(ScaleTest, IntegersUseTheTruncatedScalarAndWrap) {
  int32_t v[3] = {5, -7, INT32_MAX};
  scale_in_place(v, 3, DataType::kInt32, 2.9);  // the scalar becomes 2
  EXPECT_EQ(v[0], 10);
  EXPECT_EQ(v[1], -14);
  EXPECT_EQ(v[2], -2);
  uint8_t u[2] = {100, 3};
  uint8_t u_out[2] = {};
  scale_copy(u_out, u, 2, DataType::kUint8, 3.0);
  EXPECT_EQ(u_out[0], 44);
  EXPECT_EQ(u_out[1], 9);
  EXPECT_EQ(u[0], 100);  // source untouched
  int8_t s[1] = {1};
  scale_in_place(s, 1, DataType::kInt8, 1e300);  // an out-of-range scalar saturates rather than invoking UB
  EXPECT_EQ(s[0], 127);
}

TEST(ScaleTest, NarrowFloatsRoundOnceFromF32) {
  std::vector<uint16_t> bf(4096);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = static_cast<uint16_t>(i * 16 + 3);
  std::vector<uint16_t> scaled = bf;
  scale_in_place(scaled.data(), bf.size(), DataType::kBfloat16, 0.3);
  for (size_t i = 0; i < bf.size(); ++i) ASSERT_EQ(scaled[i], float_to_bf16(bf16_to_float(bf[i]) * 0.3f)) << i;
  uint8_t e4[256], e4_out[256];
  for (int i = 0; i < 256; ++i) e4[i] = static_cast<uint8_t>(i);
  scale_copy(e4_out, e4, 256, DataType::kFloat8E4M3, 3.0);
  for (int i = 0; i < 256; ++i) {
    const uint8_t expected = float_to_e4m3(e4m3_to_float(e4[i]) * 3.0f);
    if (std::isnan(e4m3_to_float(expected))) {
      ASSERT_TRUE(std::isnan(e4m3_to_float(e4_out[i]))) << i;
    } else {
      ASSERT_EQ(e4_out[i], expected) << i;
    }
  }
}

TEST(DivideTest, FloatsDivideRatherThanMultiplyByReciprocal) {
  std::vector<float> f(2000);
  for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0f + static_cast<float>(i) * 0.37f;
  std::vector<float> divided = f;
  divide_in_place(divided.data(), f.size(), DataType::kFloat32, 3);
  size_t differs_from_reciprocal = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_TRUE(same_bits(divided[i], f[i] / 3.0f)) << i;
    if (!same_bits(f[i] / 3.0f, f[i] * (1.0f / 3.0f))) ++differs_from_reciprocal;
  }
  EXPECT_GT(differs_from_reciprocal, 0u);  // the test data can tell the two apart
  std::vector<double> d = {1.0, 10.0, -7.5, 1e300};
  std::vector<double> d_div = d;
  divide_in_place(d_div.data(), d.size(), DataType::kFloat64, 7);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d_div[i], d[i] / 7.0);
  float z[1] = {1.0f};
  divide_in_place(z, 1, DataType::kFloat32, 0);
  EXPECT_TRUE(std::isinf(z[0]));
}

TEST(DivideTest, IntegersTruncateAndWrap) {
  int32_t i32[4] = {7, -7, INT32_MIN, 1};
  divide_in_place(i32, 4, DataType::kInt32, 2);
  EXPECT_EQ(i32[0], 3);
  EXPECT_EQ(i32[1], -3);
  EXPECT_EQ(i32[2], INT32_MIN / 2);
  EXPECT_EQ(i32[3], 0);
  int8_t i8[1] = {-128};
  divide_in_place(i8, 1, DataType::kInt8, -1);
  EXPECT_EQ(i8[0], -128);
  int64_t i64[2] = {INT64_MIN, 9};
  divide_in_place(i64, 2, DataType::kInt64, -1);
  EXPECT_EQ(i64[0], INT64_MIN);
  EXPECT_EQ(i64[1], -9);
  uint64_t u64[1] = {UINT64_MAX};
  divide_in_place(u64, 1, DataType::kUint64, 4);
  EXPECT_EQ(u64[0], UINT64_MAX / 4);
  uint32_t u32[1] = {7};
  divide_in_place(u32, 1, DataType::kUint32, -1);
  EXPECT_EQ(u32[0], static_cast<uint32_t>(-7));
}

TEST(DivideTest, Half) {
  std::vector<uint16_t> h(0x7c00);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> divided = h;
  divide_in_place(divided.data(), h.size(), DataType::kFloat16, 3);
  for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(divided[i], float_to_half(half_to_float(h[i]) / 3.0f)) << i;
}

// The bf16 kernels inline their own conversion to vectorise; they must agree with the scalar functions exactly.
TEST(WidenNarrowTest, Bf16KernelsMatchScalarConversions) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  widen_to_f32(wide.data(), all.data(), all.size(), DataType::kBfloat16, 1.0);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_TRUE(same_bits(wide[i], bf16_to_float(all[i]))) << i;
  widen_to_f32(wide.data(), all.data(), all.size(), DataType::kBfloat16, 0.25);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_TRUE(equivalent(wide[i], bf16_to_float(all[i]) * 0.25f)) << i;

  std::vector<float> probes;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) probes.push_back(float_of(static_cast<uint32_t>(u)));
  for (uint32_t u : {0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fbfffffu, 0xff800001u, 0x3f808000u, 0x3f818000u}) {
    probes.push_back(float_of(u));
  }
  std::vector<uint16_t> narrow(probes.size());
  narrow_from_f32(narrow.data(), probes.data(), probes.size(), DataType::kBfloat16);
  for (size_t i = 0; i < probes.size(); ++i) ASSERT_EQ(narrow[i], float_to_bf16(probes[i])) << bits_of(probes[i]);
}

TEST(WidenNarrowTest, EveryFormatMatchesScalarConversions) {
  std::vector<float> probes;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) probes.push_back(float_of(static_cast<uint32_t>(u)));
  const size_t n = probes.size();

  std::vector<uint16_t> h(n);
  narrow_from_f32(h.data(), probes.data(), n, DataType::kFloat16);
  std::vector<uint8_t> e4(n), e5(n);
  narrow_from_f32(e4.data(), probes.data(), n, DataType::kFloat8E4M3);
  narrow_from_f32(e5.data(), probes.data(), n, DataType::kFloat8E5M2);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], float_to_half(probes[i])) << i;
    ASSERT_EQ(e4[i], float_to_e4m3(probes[i])) << i;
    ASSERT_EQ(e5[i], float_to_e5m2(probes[i])) << i;
  }

  std::vector<float> wide(n);
  widen_to_f32(wide.data(), h.data(), n, DataType::kFloat16, 2.0);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(equivalent(wide[i], half_to_float(h[i]) * 2.0f)) << i;
  widen_to_f32(wide.data(), e4.data(), n, DataType::kFloat8E4M3, 1.0);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(wide[i], e4m3_to_float(e4[i]))) << i;
  widen_to_f32(wide.data(), e5.data(), n, DataType::kFloat8E5M2, -0.5);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(equivalent(wide[i], e5m2_to_float(e5[i]) * -0.5f)) << i;
}

TEST(WidenNarrowTest, F32IsACopyTimesScalar) {
  const std::vector<float> src = {1.0f, -3.5f, 1e-3f, 7.0f};
  std::vector<float> dst(src.size());
  widen_to_f32(dst.data(), src.data(), src.size(), DataType::kFloat32, 1.0);
  EXPECT_EQ(dst, src);
  widen_to_f32(dst.data(), src.data(), src.size(), DataType::kFloat32, 0.1);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(dst[i], src[i] * 0.1f);
  std::vector<float> in_place = src;
  widen_to_f32(in_place.data(), in_place.data(), src.size(), DataType::kFloat32, 3.0);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(in_place[i], src[i] * 3.0f);
  std::vector<float> narrowed(src.size());
  narrow_from_f32(narrowed.data(), src.data(), src.size(), DataType::kFloat32);
  EXPECT_EQ(narrowed, src);
}

TEST(WidenNarrowTest, F64AndIntegersConvertThenScale) {
  const double d[3] = {0.1, -2.5, 3.0};
  float out[3];
  widen_to_f32(out, d, 3, DataType::kFloat64, 2.0);
  EXPECT_EQ(out[0], static_cast<float>(0.1) * 2.0f);  // narrowed first, then scaled in f32
  EXPECT_EQ(out[1], -5.0f);
  EXPECT_EQ(out[2], 6.0f);
  const int32_t ints[2] = {-3, 16777217};
  widen_to_f32(out, ints, 2, DataType::kInt32, 1.0);
  EXPECT_EQ(out[0], -3.0f);
  EXPECT_EQ(out[1], 16777216.0f);
}

}  // namespace
// Streaming copies: every alignment of source and destination against the cache line, sizes below a
// line, around the head and tail, and many lines; bytes around the destination stay untouched.
TEST(StreamCopy, MatchesMemcpyAtEveryAlignmentAndSize) {
  std::mt19937 rng(7);
  std::vector<unsigned char> src(70000), dst(70000 + 256);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{128}, size_t{129},
                       size_t{1000}, size_t{4096}, size_t{65537}}) {
    for (size_t s_off : {0, 1, 17, 63}) {
      for (size_t d_off : {0, 5, 32, 63}) {
        std::fill(dst.begin(), dst.end(), 0xAB);
        stream_copy(dst.data() + 64 + d_off, src.data() + s_off, bytes);
        ASSERT_EQ(std::memcmp(dst.data() + 64 + d_off, src.data() + s_off, bytes), 0)
            << bytes << " bytes, source +" << s_off << ", destination +" << d_off;
        for (size_t i = 0; i < 64 + d_off; ++i) ASSERT_EQ(dst[i], 0xAB) << "wrote before the destination";
        for (size_t i = 64 + d_off + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB) << "wrote past the end";
      }
    }
  }
  ChunkedCopy(nullptr, nullptr, 0).copy_through(kWindowCopyChunkBytes);  // null with 0 bytes is fine
}

// A ChunkedCopy in uneven pieces, some past the end or behind what was copied: every byte once, in
// order, nothing outside the destination; a block large enough to stream (4 MiB default) and a small one.
TEST(StreamCopy, ChunkedCopyCopiesEachByteOnceInAnyPieces) {
  std::mt19937 rng(5);
  for (size_t bytes : {size_t{0}, size_t{1000}, size_t{5} << 20}) {
    std::vector<std::byte> src(bytes), dst(bytes + 128, std::byte{0xAB});
    for (auto& b : src) b = static_cast<std::byte>(rng());
    ChunkedCopy copy(dst.data() + 64 + 3, src.data(), bytes);
    size_t end = 0;
    while (!copy.finished()) {
      const size_t before = copy.copied();
      end += 1 + rng() % (kWindowCopyChunkBytes + 999);
      copy.copy_through(end);
      copy.copy_through(end / 2);  // behind: nothing
      ASSERT_EQ(copy.copied(), std::min(end, bytes));
      ASSERT_GE(copy.copied(), before);
    }
    copy.copy_through(bytes + 1);
    EXPECT_EQ(copy.copied(), bytes);
    if (bytes > 0) EXPECT_EQ(std::memcmp(dst.data() + 64 + 3, src.data(), bytes), 0) << bytes;  // src.data() may be null
    for (size_t i = 0; i < 64 + 3; ++i) ASSERT_EQ(dst[i], std::byte{0xAB}) << "wrote before the destination";
    for (size_t i = 64 + 3 + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], std::byte{0xAB}) << "wrote past the end";
  }
  EXPECT_TRUE(ChunkedCopy().finished());
}

// The streamed sum of the windowed reduce-scatter: the same bits as reduce_pair's, at every alignment
// of the destination (4-byte steps) and inputs, heads and tails included, nothing written outside.
TEST(StreamCopy, StreamedSumMatchesReducePairBitwise) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-1e3f, 1e3f);
  std::vector<float> a(20000), b(20000), want(20000), got(20000 + 64);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = value(rng);
    b[i] = value(rng) * 1e-4f;  // different exponents, so rounding matters
  }
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{15}, size_t{16}, size_t{17}, size_t{100}, size_t{19000}}) {
    for (size_t a_off : {0, 1, 3}) {
      for (size_t d_off : {0, 1, 2, 3}) {
        std::fill(got.begin(), got.end(), -7.f);
        reduce_pair(want.data(), a.data() + a_off, b.data(), count, DataType::kFloat32, ReduceKind::kSum);
        stream_sum_f32(got.data() + 16 + d_off, a.data() + a_off, b.data(), count);
        ASSERT_EQ(std::memcmp(got.data() + 16 + d_off, want.data(), count * sizeof(float)), 0)
            << count << " floats, a +" << a_off << ", destination +" << d_off;
        for (size_t i = 0; i < 16 + d_off; ++i) ASSERT_EQ(got[i], -7.f) << "wrote before the destination";
        for (size_t i = 16 + d_off + count; i < got.size(); ++i) ASSERT_EQ(got[i], -7.f) << "wrote past the end";
      }
    }
  }
}

}  // namespace fsdp
