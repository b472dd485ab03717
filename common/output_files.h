// What the metrics and trace writers share beyond JSON (common/json.h): per-rank file names and writing
// a whole file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fsdp {

// "dir/name.ext" -> "dir/name.rank<r>.ext" ("name" without an extension -> "name.rank<r>").
std::string rank_file_name(const std::string& path, int64_t rank);

// Writes `text` to `path` (creating its folder); throws std::runtime_error "<who>: cannot write 'path'".
void write_text_file(const std::string& path, const std::string& text, std::string_view who = "write");

}  // namespace fsdp
