// Element types the collectives move and reduce. Numeric values match NCCL's ncclDataType_t so the
// C API converts by cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fsdp {

enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8E4M3 = 10,
  kFloat8E5M2 = 11,
};

inline constexpr int kNumDataTypes = 12;

// Bytes per element; 0 for a value outside the enum.
size_t element_size(DataType t);
// Short name as nccl-tests prints it ("float", "bfloat16", "fp8_e4m3", ...).
std::string_view name(DataType t);
std::optional<DataType> parse_data_type(std::string_view s);
bool is_valid(DataType t);
bool is_floating(DataType t);

// Reductions of 16- and 8-bit floats run in f32 and round once at the end; every other type
// reduces in itself. This is the type partial results travel in between ranks.
DataType accumulate_type(DataType t);
inline bool needs_promotion(DataType t) { return accumulate_type(t) != t; }

}  // namespace fsdp
