#include "collectives/kernels/reduce_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/float_formats.h"

// The f32/f64 loops get an AVX2 clone picked at load time: the default x86-64 target only has SSE2, and
// these loops are the reduce-scatter hot path. ifunc-based clones need x86 ELF; elsewhere build one version.
// Not under ThreadSanitizer: its runtime is not initialised yet when the dynamic loader runs the
// ifunc resolvers that target_clones generates, and the instrumented resolver crashes.
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute) && !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define FSDP_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef FSDP_SIMD_CLONES
#define FSDP_SIMD_CLONES
#endif

#define FSDP_INLINE inline __attribute__((always_inline))

namespace fsdp {
namespace {

// Loops run in fixed-size blocks plus a tail: GCC's -O2 cost model only vectorises loops whose trip count is
// a known multiple of the vector width, so an open loop would stay scalar there.
constexpr size_t kBlock = 16;

struct Sum {
  template <typename T>
  FSDP_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));  // wraps, no UB
    } else {
      return a + b;
    }
  }
};

struct Prod {
  template <typename T>
  FSDP_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// Plain comparisons, so NaN handling matches maxps/minps (and NCCL): the second operand wins when unordered.
struct Max {
  template <typename T>
  FSDP_INLINE T operator()(T a, T b) const { return a > b ? a : b; }
};

struct Min {
  template <typename T>
  FSDP_INLINE T operator()(T a, T b) const { return a < b ? a : b; }
};

template <typename T, typename Op>
FSDP_INLINE void into_loop(T* __restrict d, const T* __restrict s, size_t n, Op op) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = op(d[i + j], s[i + j]);
  }
  for (; i < n; ++i) d[i] = op(d[i], s[i]);
}

// d = s (op) d: reduce_pair with dst aliasing b must keep the operand order, as max/min are not symmetric on NaN.
template <typename T, typename Op>
FSDP_INLINE void into_rev_loop(T* __restrict d, const T* __restrict s, size_t n, Op op) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = op(s[i + j], d[i + j]);
  }
  for (; i < n; ++i) d[i] = op(s[i], d[i]);
}

template <typename T, typename Op>
FSDP_INLINE void pair_loop(T* __restrict d, const T* __restrict a, const T* __restrict b, size_t n, Op op) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = op(a[i + j], b[i + j]);
  }
  for (; i < n; ++i) d[i] = op(a[i], b[i]);
}

// Elementwise d[i] = fn(s[i]) between distinct buffers.
template <typename D, typename S, typename Fn>
FSDP_INLINE void map_loop(D* __restrict d, const S* __restrict s, size_t n, Fn fn) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = fn(s[i + j]);
  }
  for (; i < n; ++i) d[i] = fn(s[i]);
}

template <typename T, typename Fn>
FSDP_INLINE void map_in_place(T* d, size_t n, Fn fn) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) d[i + j] = fn(d[i + j]);
  }
  for (; i < n; ++i) d[i] = fn(d[i]);
}

template <typename Fn>
FSDP_INLINE void with_op(ReduceKind op, Fn&& fn) {
  switch (op) {
    case ReduceKind::kSum: fn(Sum{}); return;
    case ReduceKind::kProd: fn(Prod{}); return;
    case ReduceKind::kMax: fn(Max{}); return;
    case ReduceKind::kMin: fn(Min{}); return;
    default: return;  // callers validate first
  }
}

template <typename T>
FSDP_INLINE void into_any(T* __restrict d, const T* __restrict s, size_t n, ReduceKind op) {
  with_op(op, [&](auto o) { into_loop(d, s, n, o); });
}
template <typename T>
FSDP_INLINE void into_rev_any(T* __restrict d, const T* __restrict s, size_t n, ReduceKind op) {
  with_op(op, [&](auto o) { into_rev_loop(d, s, n, o); });
}
template <typename T>
FSDP_INLINE void pair_any(T* __restrict d, const T* __restrict a, const T* __restrict b, size_t n, ReduceKind op) {
  with_op(op, [&](auto o) { pair_loop(d, a, b, n, o); });
}
template <typename T>
FSDP_INLINE void self_any(T* d, size_t n, ReduceKind op) {
  with_op(op, [&](auto o) { map_in_place(d, n, [o](T x) { return o(x, x); }); });
}

// Integer kernels: baseline SIMD is enough, they are not on the hot path.
template <typename T>
void into_native(T* __restrict d, const T* __restrict s, size_t n, ReduceKind op) { into_any(d, s, n, op); }
template <typename T>
void into_rev_native(T* __restrict d, const T* __restrict s, size_t n, ReduceKind op) { into_rev_any(d, s, n, op); }
template <typename T>
void pair_native(T* __restrict d, const T* __restrict a, const T* __restrict b, size_t n, ReduceKind op) {
  pair_any(d, a, b, n, op);
}

// Float kernels: non-template overloads (preferred by overload resolution) so target_clones applies cleanly.
FSDP_SIMD_CLONES void into_native(float* __restrict d, const float* __restrict s, size_t n, ReduceKind op) {
  into_any(d, s, n, op);
}
FSDP_SIMD_CLONES void into_native(double* __restrict d, const double* __restrict s, size_t n, ReduceKind op) {
  into_any(d, s, n, op);
}
FSDP_SIMD_CLONES void into_rev_native(float* __restrict d, const float* __restrict s, size_t n, ReduceKind op) {
  into_rev_any(d, s, n, op);
}
FSDP_SIMD_CLONES void into_rev_native(double* __restrict d, const double* __restrict s, size_t n, ReduceKind op) {
  into_rev_any(d, s, n, op);
}
FSDP_SIMD_CLONES void pair_native(float* __restrict d, const float* __restrict a, const float* __restrict b, size_t n,
                                  ReduceKind op) {
  pair_any(d, a, b, n, op);
}
FSDP_SIMD_CLONES void pair_native(double* __restrict d, const double* __restrict a, const double* __restrict b,
                                  size_t n, ReduceKind op) {
  pair_any(d, a, b, n, op);
}

FSDP_SIMD_CLONES void scale_f32(float* __restrict d, const float* __restrict s, size_t n, float k) {
  map_loop(d, s, n, [k](float x) { return x * k; });
}
FSDP_SIMD_CLONES void scale_f32_in_place(float* d, size_t n, float k) {
  map_in_place(d, n, [k](float x) { return x * k; });
}
FSDP_SIMD_CLONES void scale_f64(double* __restrict d, const double* __restrict s, size_t n, double k) {
  map_loop(d, s, n, [k](double x) { return x * k; });
}
FSDP_SIMD_CLONES void scale_f64_in_place(double* d, size_t n, double k) {
  map_in_place(d, n, [k](double x) { return x * k; });
}
FSDP_SIMD_CLONES void divide_f32(float* d, size_t n, float k) {
  map_in_place(d, n, [k](float x) { return x / k; });
}
FSDP_SIMD_CLONES void divide_f64(double* d, size_t n, double k) {
  map_in_place(d, n, [k](double x) { return x / k; });
}

// bf16 is FSDP's usual parameter type, so its conversions are inlined here to vectorise; they mirror
// bf16_to_float/float_to_bf16 bit for bit (the tests check that).
FSDP_INLINE float bf16_bits_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
FSDP_INLINE uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40;
  return static_cast<uint16_t>((u & 0x7fffffff) > 0x7f800000 ? quiet_nan : rounded);
}
FSDP_SIMD_CLONES void widen_bf16(float* __restrict d, const uint16_t* __restrict s, size_t n) {
  map_loop(d, s, n, [](uint16_t b) { return bf16_bits_to_f32(b); });
}
FSDP_SIMD_CLONES void widen_bf16_scaled(float* __restrict d, const uint16_t* __restrict s, size_t n, float k) {
  map_loop(d, s, n, [k](uint16_t b) { return bf16_bits_to_f32(b) * k; });
}
FSDP_SIMD_CLONES void narrow_bf16(uint16_t* __restrict d, const float* __restrict s, size_t n) {
  map_loop(d, s, n, [](float f) { return f32_to_bf16_bits(f); });
}

std::string describe_type(DataType t) {
  if (is_valid(t)) return std::string(name(t));
  return "invalid data type " + std::to_string(static_cast<int>(t));
}

std::string describe_op(ReduceKind op) {
  if (is_valid(op)) return std::string(name(op));
  return "invalid reduce op " + std::to_string(static_cast<int>(op));
}

bool is_native(DataType t) { return is_valid(t) && accumulate_type(t) == t; }

void check_reduce_args(const char* fn, DataType t, ReduceKind op) {
  const bool op_ok =
      op == ReduceKind::kSum || op == ReduceKind::kProd || op == ReduceKind::kMax || op == ReduceKind::kMin;
  if (is_native(t) && op_ok) return;
  std::string msg = std::string(fn) + ": cannot reduce " + describe_type(t) + " with " + describe_op(op);
  if (!op_ok) msg += " (only sum, prod, max and min run as kernels; avg and premulsum are sum plus scaling)";
  if (!is_native(t) && is_valid(t)) msg += " (16- and 8-bit floats must be widened to float first)";
  throw std::invalid_argument(msg);
}

// Calls fn(T{}) with the C++ type behind a native DataType.
template <typename Fn>
void with_native_type(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::kInt8: fn(int8_t{}); return;
    case DataType::kUint8: fn(uint8_t{}); return;
    case DataType::kInt32: fn(int32_t{}); return;
    case DataType::kUint32: fn(uint32_t{}); return;
    case DataType::kInt64: fn(int64_t{}); return;
    case DataType::kUint64: fn(uint64_t{}); return;
    case DataType::kFloat32: fn(float{}); return;
    case DataType::kFloat64: fn(double{}); return;
    default: return;  // callers validate first
  }
}

// The header's "scalar cast to t": truncates toward zero; saturates (NaN -> 0) where a plain cast would be UB.
template <typename T>
T int_from_double(double s) {
  if (std::isnan(s)) return 0;
  if (s <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (s >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(s);
}

// trunc(x / divisor) reduced modulo 2^bits, without the UB of INT_MIN / -1 or of mixed-sign division.
template <typename T>
T int_divide(T x, int divisor) {
  using U = std::make_unsigned_t<T>;
  if constexpr (std::is_signed_v<T>) {
    if (divisor == -1) return static_cast<T>(U{0} - static_cast<U>(x));
    return static_cast<T>(static_cast<int64_t>(x) / divisor);
  } else {
    const U magnitude = static_cast<U>(divisor < 0 ? -static_cast<int64_t>(divisor) : divisor);
    const U q = x / magnitude;
    return divisor < 0 ? static_cast<T>(U{0} - q) : q;
  }
}

// Narrow float formats for scale/divide: computed in f32 and rounded once.
struct NarrowCodec {
  float (*to_f32)(uint16_t);
  uint16_t (*from_f32)(float);
};

float e4m3_wide(uint16_t v) { return e4m3_to_float(static_cast<uint8_t>(v)); }
float e5m2_wide(uint16_t v) { return e5m2_to_float(static_cast<uint8_t>(v)); }
uint16_t e4m3_narrow(float f) { return float_to_e4m3(f); }
uint16_t e5m2_narrow(float f) { return float_to_e5m2(f); }

template <typename Storage, typename Fn>
void map_narrow(void* dst, const void* src, size_t count, NarrowCodec codec, Fn fn) {
  auto* d = static_cast<Storage*>(dst);
  const auto* s = static_cast<const Storage*>(src);
  for (size_t i = 0; i < count; ++i) d[i] = static_cast<Storage>(codec.from_f32(fn(codec.to_f32(s[i]))));
}

// Applies fn (f32 -> f32) to every element of a 16- or 8-bit float buffer; false for other types.
template <typename Fn>
bool map_narrow_float(void* dst, const void* src, size_t count, DataType t, Fn fn) {
  switch (t) {
    case DataType::kFloat16:
      map_narrow<uint16_t>(dst, src, count, {half_to_float, float_to_half}, fn);
      return true;
    case DataType::kBfloat16:
      map_narrow<uint16_t>(dst, src, count, {bf16_to_float, float_to_bf16}, fn);
      return true;
    case DataType::kFloat8E4M3:
      map_narrow<uint8_t>(dst, src, count, {e4m3_wide, e4m3_narrow}, fn);
      return true;
    case DataType::kFloat8E5M2:
      map_narrow<uint8_t>(dst, src, count, {e5m2_wide, e5m2_narrow}, fn);
      return true;
    default:
      return false;
  }
}

[[noreturn]] void throw_bad_type(const char* fn, DataType t) {
  throw std::invalid_argument(std::string(fn) + ": unsupported data type " + describe_type(t));
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t count, DataType t, ReduceKind op) {
  check_reduce_args("reduce_into", t, op);
  with_native_type(t, [&](auto tag) {
    using T = decltype(tag);
    into_native(static_cast<T*>(dst), static_cast<const T*>(src), count, op);
  });
}

void reduce_pair(void* dst, const void* a, const void* b, size_t count, DataType t, ReduceKind op) {
  check_reduce_args("reduce_pair", t, op);
  with_native_type(t, [&](auto tag) {
    using T = decltype(tag);
    auto* d = static_cast<T*>(dst);
    const auto* x = static_cast<const T*>(a);
    const auto* y = static_cast<const T*>(b);
    // Restrict-qualified kernels need distinct buffers, so each aliasing pattern gets its own loop.
    if (d == x && d == y) {
      self_any(d, count, op);
    } else if (d == x) {
      into_native(d, y, count, op);
    } else if (d == y) {
      into_rev_native(d, x, count, op);
    } else {
      pair_native(d, x, y, count, op);
    }
  });
}

void scale_copy(void* dst, const void* src, size_t count, DataType t, double scalar) {
  if (!is_valid(t)) throw_bad_type("scale_copy", t);
  if (dst == src) {
    scale_in_place(dst, count, t, scalar);
    return;
  }
  if (scalar == 1.0) {
    if (count) std::memcpy(dst, src, count * element_size(t));
    return;
  }
  const float k32 = static_cast<float>(scalar);
  if (map_narrow_float(dst, src, count, t, [k32](float x) { return x * k32; })) return;
  with_native_type(t, [&](auto tag) {
    using T = decltype(tag);
    auto* d = static_cast<T*>(dst);
    const auto* s = static_cast<const T*>(src);
    if constexpr (std::is_same_v<T, float>) {
      scale_f32(d, s, count, k32);
    } else if constexpr (std::is_same_v<T, double>) {
      scale_f64(d, s, count, scalar);
    } else {
      const T k = int_from_double<T>(scalar);
      map_loop(d, s, count, [k](T x) { return Prod{}(x, k); });
    }
  });
}

void scale_in_place(void* buf, size_t count, DataType t, double scalar) {
  if (!is_valid(t)) throw_bad_type("scale_in_place", t);
  if (scalar == 1.0) return;
  const float k32 = static_cast<float>(scalar);
  if (map_narrow_float(buf, buf, count, t, [k32](float x) { return x * k32; })) return;
  with_native_type(t, [&](auto tag) {
    using T = decltype(tag);
    auto* d = static_cast<T*>(buf);
    if constexpr (std::is_same_v<T, float>) {
      scale_f32_in_place(d, count, k32);
    } else if constexpr (std::is_same_v<T, double>) {
      scale_f64_in_place(d, count, scalar);
    } else {
      const T k = int_from_double<T>(scalar);
      map_in_place(d, count, [k](T x) { return Prod{}(x, k); });
    }
  });
}

void divide_in_place(void* buf, size_t count, DataType t, int divisor) {
  if (!is_valid(t)) throw_bad_type("divide_in_place", t);
  if (!is_floating(t) && divisor == 0) {
    throw std::invalid_argument("divide_in_place: integer division by zero for " + describe_type(t));
  }
  const float k32 = static_cast<float>(divisor);
  if (map_narrow_float(buf, buf, count, t, [k32](float x) { return x / k32; })) return;
  with_native_type(t, [&](auto tag) {
    using T = decltype(tag);
    auto* d = static_cast<T*>(buf);
    if constexpr (std::is_same_v<T, float>) {
      divide_f32(d, count, k32);
    } else if constexpr (std::is_same_v<T, double>) {
      divide_f64(d, count, static_cast<double>(divisor));
    } else {
      map_in_place(d, count, [divisor](T x) { return int_divide(x, divisor); });
    }
  });
}

void widen_to_f32(float* dst, const void* src, size_t count, DataType t, double scalar) {
  if (!is_valid(t)) throw_bad_type("widen_to_f32", t);
  const float k = static_cast<float>(scalar);
  const bool scaled = scalar != 1.0;
  switch (t) {
    case DataType::kFloat32:
      if (scaled) {
        if (dst == src) {
          scale_f32_in_place(dst, count, k);
        } else {
          scale_f32(dst, static_cast<const float*>(src), count, k);
        }
      } else if (dst != src && count) {
        std::memcpy(dst, src, count * sizeof(float));
      }
      return;
    case DataType::kBfloat16:
      if (scaled) {
        widen_bf16_scaled(dst, static_cast<const uint16_t*>(src), count, k);
      } else {
        widen_bf16(dst, static_cast<const uint16_t*>(src), count);
      }
      return;
    case DataType::kFloat16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = scaled ? half_to_float(s[i]) * k : half_to_float(s[i]);
      return;
    }
    case DataType::kFloat8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = scaled ? e4m3_to_float(s[i]) * k : e4m3_to_float(s[i]);
      return;
    }
    case DataType::kFloat8E5M2: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = scaled ? e5m2_to_float(s[i]) * k : e5m2_to_float(s[i]);
      return;
    }
    default:
      // f64 and the integers: convert to f32 first, then scale, as for every other type.
      with_native_type(t, [&](auto tag) {
        using T = decltype(tag);
        const auto* s = static_cast<const T*>(src);
        for (size_t i = 0; i < count; ++i) {
          const float x = static_cast<float>(s[i]);
          dst[i] = scaled ? x * k : x;
        }
      });
      return;
  }
}

void narrow_from_f32(void* dst, const float* src, size_t count, DataType t) {
  switch (t) {
    case DataType::kFloat32:
      if (dst != src && count) std::memmove(dst, src, count * sizeof(float));
      return;
    case DataType::kBfloat16:
      narrow_bf16(static_cast<uint16_t*>(dst), src, count);
      return;
    case DataType::kFloat16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = float_to_half(src[i]);
      return;
    }
    case DataType::kFloat8E4M3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = float_to_e4m3(src[i]);
      return;
    }
    case DataType::kFloat8E5M2: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = float_to_e5m2(src[i]);
      return;
    }
    default:
      throw std::invalid_argument("narrow_from_f32: unsupported data type " + describe_type(t) +
                                  " (expected half, bfloat16, fp8_e4m3, fp8_e5m2 or float)");
  }
}

}  // namespace fsdp
