// MXFP8 (OCP Microscaling Formats v1.0): blocks of 32 elements, each an 8-bit float (E4M3 or E5M2),
// sharing one E8M0 scale (an unsigned power of two 2^(code - 127); code 0xFF is NaN). A block decodes
// as element * scale, so n elements cost n + ceil(n / 32) bytes: 8.25 bits each.
//
// Used as a wire encoding only: the collectives quantise before sending and dequantise (and reduce in
// f32) on arrival; nothing is ever computed in 8 bits.
//
// Wire layout of n elements (wire_bytes(n) bytes): the n element codes, then the block_count(n) scale
// codes. The last block may be shorter than 32; its scale comes from its own elements only.
//
// Special values, as the spec has them: a block holding a NaN gets the NaN scale (the whole block
// decodes as NaN). An infinity does not set the scale (the finite elements do); it encodes as E5M2's
// infinity, and as NaN in E4M3, which has no infinity (PyTorch's cast does the same).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/dtype.h"
#include "spec/mxfp8_wire.h"

namespace fsdp::mx {

inline constexpr size_t kBlockSize = spec::kMxfp8BlockSize;
inline constexpr uint8_t kScaleNaN = 0xFF;
inline constexpr int kScaleBias = 127;

// How a block's scale is chosen from its largest finite magnitude amax.
enum class ScaleRounding {
  // The smallest power of two with amax / scale <= the element format's max, so no element saturates
  // (the recipe NVIDIA found necessary for pre-training). The default.
  kCeil,
  // The spec's 2^(floor(log2 amax) - emax_elem): up to 1.75x above the max can occur; such elements
  // saturate to +-max.
  kFloor,
};

struct Format {
  DataType element = DataType::kFloat8E4M3;  // kFloat8E4M3 or kFloat8E5M2
  ScaleRounding rounding = ScaleRounding::kCeil;
};

// "mxfp8" / "mxfp8_e4m3" -> E4M3, "mxfp8_e5m2" -> E5M2 (ceil rounding); nullopt otherwise.
std::optional<Format> parse_format(std::string_view s);

inline constexpr size_t block_count(size_t n) { return spec::mxfp8_block_count(n); }
inline constexpr size_t wire_bytes(size_t n) { return spec::mxfp8_wire_bytes(n); }

// 2^(code - 127) as f32 (2^-127 is an f32 subnormal, still exact); NaN for kScaleNaN.
float scale_to_float(uint8_t code);

// The scale code for a block whose largest finite magnitude is amax (>= 0); 127 (scale 1) for an
// all-zero block.
uint8_t choose_scale(float amax, Format f);

// Quantises n elements of `in` (kFloat32 or kBfloat16) into wire (wire_bytes(n) bytes).
void quantize(const void* in, DataType in_type, size_t n, uint8_t* wire, Format f);

// Decodes n elements of wire into out (kFloat32 or kBfloat16; bf16 rounds once from the f32 value).
void dequantize(const uint8_t* wire, size_t n, DataType element, void* out, DataType out_type);

// Elements [first, first + n) of a count-element encoding (wire holds wire_bytes(count) bytes) into
// out[0, n), kFloat32 or kBfloat16. With precision kBfloat16 and out_type kFloat32 each value is rounded to
// bf16 and widened back: what a bf16 decode followed by a widening copy gives, in one pass (FSDP's fused
// copy-out). Otherwise precision must equal out_type.
void dequantize_range(const uint8_t* wire, size_t count, size_t first, size_t n, DataType element, void* out,
                      DataType out_type, DataType precision);

// acc[i] += decoded element i, in f32: how a reduction consumes a quantised contribution.
void dequantize_add(const uint8_t* wire, size_t n, DataType element, float* acc);

// The kernels come compiled for several x86 instruction sets, bitwise equal; the widest the CPU supports
// is used unless a test or benchmark picks another.
enum class Isa { kBaseline, kAvx2, kAvx512 };  // baseline: x86-64's SSE2 (or plain C++ elsewhere)
std::string_view isa_name(Isa isa);  // "baseline", "avx2", "avx512"
// kAvx512 needs AVX-512 F, BW and VL; both wide sets need x86-64 and a GCC-compatible compiler.
bool isa_supported(Isa isa);
Isa best_isa();
Isa active_isa();
// Routes every later kernel call through `isa`; throws std::invalid_argument if it is not supported.
// For tests and benchmarks: not meant to be switched while other threads run kernels.
void use_isa(Isa isa);

}  // namespace fsdp::mx
