// What the metrics and trace writers share: the little JSON they emit (escaped strings, numbers with
// NaN/Inf as null, which JSON lacks a literal for) and per-rank file names.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fsdp::train::json {

std::string quote(std::string_view s);  // "..." with ", \ and control characters escaped
std::string number(double v);           // shortest round-trip digits; null when not finite

}  // namespace fsdp::train::json

namespace fsdp::train {

// "dir/name.ext" -> "dir/name.rank<r>.ext" ("name" without an extension -> "name.rank<r>").
std::string rank_file_name(const std::string& path, int64_t rank);

// Writes `text` to `path` (creating its folder); throws std::runtime_error "<who>: cannot write 'path'".
void write_text_file(const std::string& path, const std::string& text, std::string_view who = "write");

}  // namespace fsdp::train
