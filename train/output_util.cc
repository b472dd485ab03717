#include "train/output_util.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace fsdp::train::json {

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
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
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
  return std::string(sci, e.ptr);
}

}  // namespace fsdp::train::json

namespace fsdp::train {

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

}  // namespace fsdp::train
