// Helpers for the project's TOML files (model specs, chip profiles, job configs): typed field access whose
// errors name the file and line, and a check that a table has no unknown keys (typos must not pass).
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "common/errors.h"

namespace fsdp::toml_util {

// "spec.toml:12: " for a node with a known source position.
std::string where(std::string_view source, const toml::source_region& region);
[[noreturn]] void fail(std::string_view source, const toml::node& node, const std::string& message);

// Parses the whole document; a syntax error becomes a InputError "file:line:col: description".
toml::table parse(std::string_view text, std::string_view source);

void check_keys(std::string_view source, const toml::table& table, std::string_view table_name,
                std::initializer_list<std::string_view> allowed);

std::optional<std::string> get_string(std::string_view source, const toml::table& t, std::string_view key);
std::optional<int64_t> get_int(std::string_view source, const toml::table& t, std::string_view key);
std::optional<double> get_number(std::string_view source, const toml::table& t, std::string_view key);
std::optional<bool> get_bool(std::string_view source, const toml::table& t, std::string_view key);

std::string read_file(const std::string& path);  // throws InputError when it cannot be read

}  // namespace fsdp::toml_util
