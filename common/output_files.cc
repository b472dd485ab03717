#include "common/output_files.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace fsdp {

std::string rank_file_name(const std::string& path, int64_t rank) {
  std::filesystem::path p(path);
  const std::string ext = p.extension().string();
  p.replace_extension();
  return p.string() + ".rank" + std::to_string(rank) + ext;
}

void write_text_file(const std::string& path, const std::string& text, std::string_view who) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) throw std::runtime_error(std::string(who) + ": cannot write '" + path + "'");
}

}  // namespace fsdp
