// The project's little JSON: a streaming writer (fsdp-bench's --json, metrics records, traces) and a
// reader (the benchmark report and schema check, the tests that parse what the writers emit).
// Numbers are doubles, and integers written without fraction or exponent are also kept exactly as
// int64 (safetensors offsets, counts); objects keep key order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fsdp::json {

// --- reading ---

class Value {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool b = false;
  double num = 0;
  bool exact_integer = false;  // the number was an integer literal that fits int64: `integer_value`
  int64_t integer_value = 0;
  std::string str;
  std::vector<Value> items;                           // arrays
  std::vector<std::pair<std::string, Value>> fields;  // objects, in document order

  // Defined in json.cc, where Value is complete: clang (unlike g++) refuses to instantiate
  // pair<string, Value> members inline while the class is still being defined.
  Value();
  ~Value();
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;

  bool is_null() const { return kind == Kind::kNull; }
  // Member lookup; throws std::runtime_error naming the key when absent or not an object.
  const Value& at(std::string_view key) const;
  const Value* find(std::string_view key) const;
  // Typed access; each throws std::runtime_error naming what was expected.
  double number() const;
  int64_t integer() const;  // only an exact integer literal; 2.5 or 1e3 or 2^63 throw
  const std::string& string() const;
  bool boolean() const;
  const std::vector<Value>& array() const;
  const std::vector<std::pair<std::string, Value>>& object() const;
};

// Throws std::runtime_error("json: <what> at offset N") on malformed text or trailing characters.
Value parse(std::string_view text);

// --- writing ---

std::string quote(std::string_view s);  // a JSON string literal, escaped
std::string number(double v);           // shortest round-trip text; non-finite values become null

// Builds a document in order: begin/end objects and arrays, keys, values; commas are handled.
class Writer {
 public:
  Writer& begin_object();
  Writer& end_object();
  Writer& begin_array();
  Writer& end_array();
  Writer& key(std::string_view k);
  Writer& value(std::string_view s);
  Writer& value(const char* s) { return value(std::string_view(s)); }
  Writer& value(double v);
  Writer& value(int64_t v);
  Writer& value(int v) { return value(static_cast<int64_t>(v)); }
  Writer& value(size_t v) { return value(static_cast<int64_t>(v)); }
  Writer& value(bool v);
  Writer& null();
  const std::string& text() const { return out_; }

 private:
  void separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace fsdp::json
