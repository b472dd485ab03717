#include "common/dtype.h"

#include <array>
#include <cctype>
#include <string>

namespace fsdp {
namespace {

struct Alias {
  std::string_view text;
  DataType type;
};

// Canonical nccl-tests names come first so name() and parse_data_type() agree; the rest are the spellings
// people type from PyTorch, NumPy and nccl-tests' newer fp8 names.
constexpr std::array kAliases = {
    Alias{"int8", DataType::kInt8},           Alias{"i8", DataType::kInt8},
    Alias{"char", DataType::kInt8},           Alias{"uint8", DataType::kUint8},
    Alias{"u8", DataType::kUint8},            Alias{"int32", DataType::kInt32},
    Alias{"i32", DataType::kInt32},           Alias{"int", DataType::kInt32},
    Alias{"uint32", DataType::kUint32},       Alias{"u32", DataType::kUint32},
    Alias{"int64", DataType::kInt64},         Alias{"i64", DataType::kInt64},
    Alias{"uint64", DataType::kUint64},       Alias{"u64", DataType::kUint64},
    Alias{"half", DataType::kFloat16},        Alias{"float16", DataType::kFloat16},
    Alias{"f16", DataType::kFloat16},         Alias{"fp16", DataType::kFloat16},
    Alias{"float", DataType::kFloat32},       Alias{"float32", DataType::kFloat32},
    Alias{"f32", DataType::kFloat32},         Alias{"fp32", DataType::kFloat32},
    Alias{"double", DataType::kFloat64},      Alias{"float64", DataType::kFloat64},
    Alias{"f64", DataType::kFloat64},         Alias{"fp64", DataType::kFloat64},
    Alias{"bfloat16", DataType::kBfloat16},   Alias{"bf16", DataType::kBfloat16},
    Alias{"fp8_e4m3", DataType::kFloat8E4M3}, Alias{"e4m3", DataType::kFloat8E4M3},
    Alias{"e4m3fn", DataType::kFloat8E4M3},   Alias{"f8e4m3", DataType::kFloat8E4M3},
    Alias{"fp8e4m3", DataType::kFloat8E4M3},  Alias{"float8_e4m3fn", DataType::kFloat8E4M3},
    Alias{"fp8_e5m2", DataType::kFloat8E5M2}, Alias{"e5m2", DataType::kFloat8E5M2},
    Alias{"f8e5m2", DataType::kFloat8E5M2},   Alias{"fp8e5m2", DataType::kFloat8E5M2},
    Alias{"float8_e5m2", DataType::kFloat8E5M2},
};

}  // namespace

bool is_valid(DataType t) {
  const int v = static_cast<int>(t);
  return v >= 0 && v < kNumDataTypes;
}

size_t element_size(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

std::string_view name(DataType t) {
  switch (t) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "half";
    case DataType::kFloat32: return "float";
    case DataType::kFloat64: return "double";
    case DataType::kBfloat16: return "bfloat16";
    case DataType::kFloat8E4M3: return "fp8_e4m3";
    case DataType::kFloat8E5M2: return "fp8_e5m2";
  }
  return "invalid";
}

std::optional<DataType> parse_data_type(std::string_view s) {
  std::string lower(s);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const Alias& a : kAliases) {
    if (a.text == lower) return a.type;
  }
  return std::nullopt;
}

bool is_floating(DataType t) {
  switch (t) {
    case DataType::kFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kBfloat16:
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      return true;
    default:
      return false;
  }
}

DataType accumulate_type(DataType t) {
  switch (t) {
    case DataType::kFloat16:
    case DataType::kBfloat16:
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      return DataType::kFloat32;
    default:
      return t;
  }
}

}  // namespace fsdp
