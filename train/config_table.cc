// Reading the key table (config_fields.cc): a key by name, the sections, a key's type name, and what
// walks every key: to_toml(), the reference rows and the usage text.
#include <algorithm>
#include <sstream>

#include "train/config_fields.h"

namespace fsdp::train {
namespace config_table {

const Field* find_field(std::string_view section, std::string_view key) {
  for (const auto& f : fields()) {
    if (f.section == section && f.key == key) return &f;
  }
  return nullptr;
}

const Field* find_field(std::string_view dotted) {
  const auto dot = dotted.rfind('.');
  if (dot == std::string_view::npos) return nullptr;
  return find_field(dotted.substr(0, dot), dotted.substr(dot + 1));
}

bool is_section_or_parent(std::string_view dotted) {
  for (const auto& f : fields()) {
    if (f.section == dotted ||
        (f.section.starts_with(dotted) && f.section.size() > dotted.size() && f.section[dotted.size()] == '.')) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> section_names() {
  std::vector<std::string> s;
  for (const auto& f : fields()) {
    if (std::find(s.begin(), s.end(), f.section) == s.end()) s.push_back(f.section);
  }
  return s;
}

std::vector<std::string> keys_of(std::string_view section) {
  std::vector<std::string> k;
  for (const auto& f : fields()) {
    if (f.section == section) k.push_back(f.key);
  }
  return k;
}

std::string type_name(const Field& f) {
  switch (f.kind) {
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kChoice:
      return join(f.choices, "|");
    case Kind::kIntOrChoice:
      return join(f.choices, "|") + "|int";
    case Kind::kList:
      return "list";
  }
  return "?";
}

}  // namespace config_table

using namespace config_table;

std::string TrainConfig::to_toml() const {
  std::ostringstream out;
  std::string section;
  for (const auto& f : fields()) {
    if (f.section != section) {
      out << (section.empty() ? "" : "\n") << "[" << f.section << "]\n";
      section = f.section;
    }
    const std::string v = f.get(*this);
    if (v.empty()) {
      out << "# " << f.key << " = (unset)\n";
    } else {
      out << f.key << " = " << v << "\n";
    }
  }
  return out.str();
}

std::vector<ConfigKeyInfo> train_config_keys() {
  const TrainConfig defaults;
  std::vector<ConfigKeyInfo> rows;
  for (const auto& f : fields()) {
    rows.push_back({f.section, f.key, type_name(f), f.get(defaults), f.help, f.torchtitan});
  }
  return rows;
}

std::string train_config_usage(std::string_view program) {
  std::ostringstream out;
  out << "usage: " << program << " [--config FILE.toml] [--section.key VALUE | --section.key=VALUE]...\n\n"
      << "  --config FILE          TorchTitan-style TOML job file (also --job.config_file)\n"
      << "  --help, -h             this text\n"
      << "  --print-config         print every key and FSDP_* knob as resolved here, then exit\n"
      << "  --section.key VALUE    override one key after the file; a bare --key sets a bool key to true,\n"
      << "                         --section.no_key sets it to false; a list key takes a,b,c\n\n"
      << "keys (default in brackets; * = TorchTitan's name and meaning, otherwise ours):\n";
  std::string section;
  for (const auto& row : train_config_keys()) {
    if (row.section != section) {
      out << "\n[" << row.section << "]\n";
      section = row.section;
    }
    std::string head = "  " + std::string(row.torchtitan ? "*" : " ") + row.section + "." + row.key;
    head += " " + row.type;
    out << head << "  [" << (row.default_value.empty() ? "unset" : row.default_value) << "]\n      " << row.help
        << "\n";
  }
  return out.str();
}

}  // namespace fsdp::train
