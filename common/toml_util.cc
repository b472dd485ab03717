#include "common/toml_util.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fsdp::toml_util {

std::string where(std::string_view source, const toml::source_region& region) {
  std::string s(source);
  if (region.begin.line > 0) s += ":" + std::to_string(region.begin.line);
  return s + ": ";
}

void fail(std::string_view source, const toml::node& node, const std::string& message) {
  throw InputError(where(source, node.source()) + message);
}

toml::table parse(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw InputError(std::string(source) + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                    ": malformed TOML: " + std::string(e.description()));
  }
}

void check_keys(std::string_view source, const toml::table& table, std::string_view table_name,
                std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, node] : table) {
    bool ok = false;
    for (auto a : allowed) ok = ok || key.str() == a;
    if (!ok) {
      std::string list;
      for (auto a : allowed) list += std::string(list.empty() ? "" : ", ") + std::string(a);
      fail(source, node,
           "unknown key '" + std::string(key.str()) + "' in " + std::string(table_name) + " (allowed: " + list + ")");
    }
  }
}

std::optional<std::string> get_string(std::string_view source, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (!n->is_string()) fail(source, *n, "'" + std::string(key) + "' must be a string");
  return std::string(n->as_string()->get());
}

std::optional<int64_t> get_int(std::string_view source, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (!n->is_integer()) fail(source, *n, "'" + std::string(key) + "' must be an integer");
  return n->as_integer()->get();
}

std::optional<double> get_number(std::string_view source, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (n->is_integer()) return static_cast<double>(n->as_integer()->get());
  if (!n->is_floating_point()) fail(source, *n, "'" + std::string(key) + "' must be a number");
  return n->as_floating_point()->get();
}

std::optional<bool> get_bool(std::string_view source, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (!n->is_boolean()) fail(source, *n, "'" + std::string(key) + "' must be true or false");
  return n->as_boolean()->get();
}

std::string read_file(const std::string& path) {
  // A directory opens as a stream on Linux and reads as empty: refuse it by name, not as an empty file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError("'" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError("cannot read '" + path + "': read error");
  return ss.str();
}

}  // namespace fsdp::toml_util
