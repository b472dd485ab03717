// The JSON the safetensors header needs: a parser into a tree of values that keeps integers exact (the
// shared reader in common/json.h holds numbers as doubles), and the shared string escaper.
// Numbers are kept as double and as int64 when they are integers (data offsets exceed 2^53 only for
// files over 8 PiB). Throws CheckpointError with the byte offset of the first syntax error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/json.h"

namespace fsdp::runtime::checkpoint::json {

struct Value;
using Object = std::map<std::string, Value>;
using Array = std::vector<Value>;

struct Value {
  // null, bool, integer, real, string, array, object
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<Array>, std::shared_ptr<Object>> v;

  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(v); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<Array>>(v); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  // Accessors throw CheckpointError("expected <kind>") on the wrong kind.
  const Object& object() const;
  const Array& array() const;
  const std::string& string() const;
  int64_t integer() const;
};

Value parse(std::string_view text);
// "..." with the escapes JSON requires (the project's one writer).
using fsdp::json::quote;

}  // namespace fsdp::runtime::checkpoint::json
