#include "collectives/kernels/mxfp8.h"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "collectives/kernels/mxfp8_isa.h"
#include "common/float_formats.h"

// The baseline build of the kernels (no target pragma): SSE2 on x86-64.
#include "collectives/kernels/mxfp8_kernels.inc"

namespace fsdp::mx {

namespace detail {
const Kernels& baseline_kernels() { return kKernels; }
}  // namespace detail

namespace {

int emax_of(DataType element) {
  if (element == DataType::kFloat8E4M3) return detail::E4m3::emax;
  if (element == DataType::kFloat8E5M2) return detail::E5m2::emax;
  throw std::invalid_argument("mxfp8: element type must be fp8_e4m3 or fp8_e5m2, got " + std::string(name(element)));
}

void check_wide(DataType t, const char* what) {
  if (t != DataType::kFloat32 && t != DataType::kBfloat16) {
    throw std::invalid_argument(std::string("mxfp8 ") + what + ": type must be float or bfloat16, got " +
                                std::string(name(t)));
  }
}

const detail::Kernels& kernels_of(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return detail::avx2_kernels();
    case Isa::kAvx512: return detail::avx512_kernels();
    case Isa::kBaseline: break;
  }
  return detail::baseline_kernels();
}

std::atomic<int> g_active_isa{-1};  // -1: not chosen yet (best_isa() on first use)

const detail::Kernels& active() { return kernels_of(active_isa()); }

}  // namespace

std::optional<Format> parse_format(std::string_view s) {
  if (s == "mxfp8" || s == "mxfp8_e4m3") return Format{DataType::kFloat8E4M3, ScaleRounding::kCeil};
  if (s == "mxfp8_e5m2") return Format{DataType::kFloat8E5M2, ScaleRounding::kCeil};
  return std::nullopt;
}

float scale_to_float(uint8_t code) {
  if (code == kScaleNaN) return std::numeric_limits<float>::quiet_NaN();
  return detail::pow2(static_cast<int>(code) - kScaleBias);
}

uint8_t choose_scale(float amax, Format f) { return detail::scale_code(amax, emax_of(f.element), f.rounding); }

void quantize(const void* in, DataType in_type, size_t n, uint8_t* wire, Format f) {
  check_wide(in_type, "quantize");
  emax_of(f.element);
  active().quantize(in, in_type, n, wire, f);
}

void dequantize(const uint8_t* wire, size_t n, DataType element, void* out, DataType out_type) {
  check_wide(out_type, "dequantize");
  emax_of(element);
  active().dequantize(wire, n, 0, n, element, out, out_type, false);
}

void dequantize_range(const uint8_t* wire, size_t count, size_t first, size_t n, DataType element, void* out,
                      DataType out_type, DataType precision) {
  check_wide(out_type, "dequantize_range");
  emax_of(element);
  const bool via_bf16 = out_type == DataType::kFloat32 && precision == DataType::kBfloat16;
  if (precision != out_type && !via_bf16) {
    throw std::invalid_argument("mxfp8 dequantize_range: precision " + std::string(name(precision)) +
                                " with output " + std::string(name(out_type)) +
                                " (bfloat16 precision into float output, or the output's own type)");
  }
  if (first > count || n > count - first) {
    throw std::invalid_argument("mxfp8 dequantize_range: elements [" + std::to_string(first) + ", " +
                                std::to_string(first + n) + ") of " + std::to_string(count));
  }
  active().dequantize(wire, count, first, n, element, out, out_type, via_bf16);
}

void dequantize_add(const uint8_t* wire, size_t n, DataType element, float* acc) {
  emax_of(element);
  active().dequantize_add(wire, n, element, acc);
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kBaseline: break;
  }
  return "baseline";
}

bool isa_supported(Isa isa) {
  if (isa == Isa::kBaseline) return true;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();  // may run before the constructor that would otherwise do it
  if (isa == Isa::kAvx2) return __builtin_cpu_supports("avx2");
  if (isa == Isa::kAvx512) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }
#endif
  return false;
}

Isa best_isa() {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (isa_supported(isa)) return isa;
  }
  return Isa::kBaseline;
}

Isa active_isa() {
  int isa = g_active_isa.load(std::memory_order_relaxed);
  if (isa < 0) {
    isa = static_cast<int>(best_isa());
    g_active_isa.store(isa, std::memory_order_relaxed);
  }
  return static_cast<Isa>(isa);
}

void use_isa(Isa isa) {
  if (!isa_supported(isa)) {
    throw std::invalid_argument("mxfp8: instruction set " + std::string(isa_name(isa)) + " is not supported here");
  }
  g_active_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace fsdp::mx
