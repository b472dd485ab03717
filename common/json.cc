#include "common/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace fsdp::json {

Value::Value() = default;
Value::~Value() = default;
Value::Value(const Value&) = default;
Value::Value(Value&&) noexcept = default;
Value& Value::operator=(const Value&) = default;
Value& Value::operator=(Value&&) noexcept = default;
namespace {

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  Value document() {
    Value v = value();
    space();
    if (pos_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("json: " + what + " at offset " + std::to_string(pos_));
  }
  void space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value() {
    space();
    if (pos_ >= s_.size()) fail("unexpected end");
    Value v;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.kind = Value::Kind::kObject;
      if (eat('}')) return v;
      do {
        space();
        std::string k = string_literal();
        expect(':');
        v.fields.emplace_back(std::move(k), value());
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++pos_;
      v.kind = Value::Kind::kArray;
      if (eat(']')) return v;
      do v.items.push_back(value());
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Value::Kind::kString;
      v.str = string_literal();
    } else if (literal("true")) {
      v.kind = Value::Kind::kBool;
      v.b = true;
    } else if (literal("false")) {
      v.kind = Value::Kind::kBool;
    } else if (literal("null")) {
    } else {
      v.kind = Value::Kind::kNumber;
      const char* begin = s_.data() + pos_;
      auto [end, ec] = std::from_chars(begin, s_.data() + s_.size(), v.num);
      if (ec != std::errc() || end == begin) fail("bad value");
      const std::string_view token(begin, static_cast<size_t>(end - begin));
      if (token.find_first_of(".eE") == std::string_view::npos) {
        auto [iend, iec] = std::from_chars(begin, end, v.integer_value);
        v.exact_integer = iec == std::errc() && iend == end;
      }
      pos_ += token.size();
    }
    return v;
  }

  std::string string_literal() {
    if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unfinished escape");
      c = s_[pos_++];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) fail("short \\u escape");
          unsigned code = 0;
          auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, code, 16);
          if (ec != std::errc() || end != s_.data() + pos_ + 4) fail("bad \\u escape");
          pos_ += 4;
          // A UTF-16 surrogate pair (\ud83d\ude00) is one code point beyond the BMP.
          if (code >= 0xD800 && code <= 0xDBFF && s_.substr(pos_, 2) == "\\u" && pos_ + 6 <= s_.size()) {
            unsigned low = 0;
            auto [lend, lec] = std::from_chars(s_.data() + pos_ + 2, s_.data() + pos_ + 6, low, 16);
            if (lec == std::errc() && lend == s_.data() + pos_ + 6 && low >= 0xDC00 && low <= 0xDFFF) {
              pos_ += 6;
              const unsigned cp = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
              out += static_cast<char>(0xf0 | (cp >> 18));
              out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
              out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
              out += static_cast<char>(0x80 | (cp & 0x3f));
              break;
            }
          }
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xc0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3f));
          } else {
            out += static_cast<char>(0xe0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (code & 0x3f));
          }
          break;
        }
        default: out += c; break;  // \" \\ \/
      }
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

[[noreturn]] void wrong_kind(const char* want) { throw std::runtime_error(std::string("json: expected ") + want); }

}  // namespace

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Value& Value::at(std::string_view key) const {
  if (kind != Kind::kObject) wrong_kind("an object");
  if (const Value* v = find(key)) return *v;
  throw std::runtime_error("json: missing key '" + std::string(key) + "'");
}

double Value::number() const {
  if (kind != Kind::kNumber) wrong_kind("a number");
  return num;
}
int64_t Value::integer() const {
  if (kind != Kind::kNumber || !exact_integer) wrong_kind("an integer");
  return integer_value;
}
const std::string& Value::string() const {
  if (kind != Kind::kString) wrong_kind("a string");
  return str;
}
bool Value::boolean() const {
  if (kind != Kind::kBool) wrong_kind("a boolean");
  return b;
}
const std::vector<Value>& Value::array() const {
  if (kind != Kind::kArray) wrong_kind("an array");
  return items;
}

const std::vector<std::pair<std::string, Value>>& Value::object() const {
  if (kind != Kind::kObject) wrong_kind("an object");
  return fields;
}

Value parse(std::string_view text) { return Reader(text).document(); }

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  // Shortest round-trip digits, written plainly ("0.0008", "500000") unless the exponent form is much
  // shorter ("1e-08").
  char fixed[400];
  char sci[64];
  auto f = std::to_chars(fixed, fixed + sizeof(fixed), v, std::chars_format::fixed);
  auto e = std::to_chars(sci, sci + sizeof(sci), v, std::chars_format::scientific);
  if (f.ec == std::errc() && f.ptr - fixed <= (e.ptr - sci) + 3) return std::string(fixed, f.ptr);
  return e.ec == std::errc() ? std::string(sci, e.ptr) : "null";
}

void Writer::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ",";
    first_.back() = false;
  }
}

Writer& Writer::begin_object() {
  separate();
  out_ += "{";
  first_.push_back(true);
  return *this;
}
Writer& Writer::end_object() {
  first_.pop_back();
  out_ += "}";
  return *this;
}
Writer& Writer::begin_array() {
  separate();
  out_ += "[";
  first_.push_back(true);
  return *this;
}
Writer& Writer::end_array() {
  first_.pop_back();
  out_ += "]";
  return *this;
}
Writer& Writer::key(std::string_view k) {
  separate();
  out_ += quote(k) + ":";
  after_key_ = true;
  return *this;
}
Writer& Writer::value(std::string_view s) {
  separate();
  out_ += quote(s);
  return *this;
}
Writer& Writer::value(double v) {
  separate();
  out_ += number(v);
  return *this;
}
Writer& Writer::value(int64_t v) {
  separate();
  out_ += std::to_string(v);
  return *this;
}
Writer& Writer::value(bool v) {
  separate();
  out_ += v ? "true" : "false";
  return *this;
}
Writer& Writer::null() {
  separate();
  out_ += "null";
  return *this;
}

}  // namespace fsdp::json
