#include "runtime/checkpoint/json.h"

#include <charconv>

#include "runtime/checkpoint/errors.h"

namespace fsdp::runtime::checkpoint::json {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value document() {
    Value v = value();
    skip_ws();
    if (pos_ != s_.size()) error("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw CheckpointError("JSON syntax error at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  char peek() {
    skip_ws();
    if (pos_ >= s_.size()) error("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) error(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value() {
    const char c = peek();
    if (c == '{') return Value{object()};
    if (c == '[') return Value{array()};
    if (c == '"') return Value{string()};
    if (literal("true")) return Value{true};
    if (literal("false")) return Value{false};
    if (literal("null")) return Value{nullptr};
    return number();
  }

  std::shared_ptr<Object> object() {
    auto o = std::make_shared<Object>();
    expect('{');
    if (peek() == '}') {
      ++pos_;
      return o;
    }
    for (;;) {
      if (peek() != '"') error("expected a key");
      std::string key = string();
      expect(':');
      if (!o->emplace(key, value()).second) error("duplicate key '" + key + "'");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return o;
    }
  }

  std::shared_ptr<Array> array() {
    auto a = std::make_shared<Array>();
    expect('[');
    if (peek() == ']') {
      ++pos_;
      return a;
    }
    for (;;) {
      a->push_back(value());
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return a;
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) error("unterminated escape");
      c = s_[pos_++];
      switch (c) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) error("short \\u escape");
          unsigned cp = 0;
          auto r = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, cp, 16);
          if (r.ptr != s_.data() + pos_ + 4) error("bad \\u escape");
          pos_ += 4;
          // UTF-8 encode (surrogate pairs are passed through as two 3-byte sequences: names are ASCII).
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: error(std::string("bad escape \\") + c);
      }
    }
    if (pos_ >= s_.size()) error("unterminated string");
    ++pos_;
    return out;
  }

  Value number() {
    const size_t begin = pos_;
    while (pos_ < s_.size() && std::string_view("+-0123456789.eE").find(s_[pos_]) != std::string_view::npos) ++pos_;
    const std::string_view tok = s_.substr(begin, pos_ - begin);
    if (tok.empty()) error("unexpected character");
    int64_t i = 0;
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), i);
    if (r.ec == std::errc() && r.ptr == tok.data() + tok.size()) return Value{i};
    double d = 0;
    auto rd = std::from_chars(tok.data(), tok.data() + tok.size(), d);
    if (rd.ec != std::errc() || rd.ptr != tok.data() + tok.size()) error("bad number '" + std::string(tok) + "'");
    return Value{d};
  }

  std::string_view s_;
  size_t pos_ = 0;
};

[[noreturn]] void wrong_kind(const char* want) { throw CheckpointError(std::string("JSON: expected ") + want); }

}  // namespace

const Object& Value::object() const {
  if (!is_object()) wrong_kind("an object");
  return *std::get<std::shared_ptr<Object>>(v);
}
const Array& Value::array() const {
  if (!is_array()) wrong_kind("an array");
  return *std::get<std::shared_ptr<Array>>(v);
}
const std::string& Value::string() const {
  if (!is_string()) wrong_kind("a string");
  return std::get<std::string>(v);
}
int64_t Value::integer() const {
  if (!is_int()) wrong_kind("an integer");
  return std::get<int64_t>(v);
}

Value parse(std::string_view text) { return Parser(text).document(); }

}  // namespace fsdp::runtime::checkpoint::json
