// Reading a configuration: TOML documents and `--section.key value` flags, each value type-checked
// against the key table (config_fields.h) with errors naming the file:line or the flag.
#include <charconv>
#include <cmath>

#include "common/toml_util.h"
#include "train/config.h"
#include "train/config_fields.h"

namespace fsdp::train {
namespace {

using namespace config_table;
namespace tu = toml_util;

std::string_view node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    default:
      return "a date/time";
  }
}

std::string expected(const Field& f) {
  switch (f.kind) {
    case Kind::kBool:
      return "expected true or false";
    case Kind::kInt:
      return "expected an integer";
    case Kind::kFloat:
      return "expected a number";
    case Kind::kString:
      return "expected a string";
    case Kind::kChoice:
      return "expected one of " + join(f.choices, ", ");
    case Kind::kIntOrChoice:
      return "expected an integer or one of " + join(f.choices, ", ");
  }
  return "";
}

// "" when `s` is an allowed choice, else the complaint.
std::string check_choice(const Field& f, const std::string& s) {
  if (std::find(f.choices.begin(), f.choices.end(), s) != f.choices.end()) return "";
  return "'" + s + "' is not one of " + join(f.choices, ", ");
}

// A TOML node as the field's type; on mismatch returns the complaint in `error`.
std::optional<Value> value_from_node(const Field& f, const toml::node& n, std::string& error) {
  std::optional<Value> v;
  switch (f.kind) {
    case Kind::kBool:
      if (n.is_boolean()) v = n.as_boolean()->get();
      break;
    case Kind::kInt:
      if (n.is_integer()) v = n.as_integer()->get();
      break;
    case Kind::kFloat:
      if (n.is_integer()) v = static_cast<double>(n.as_integer()->get());
      if (n.is_floating_point()) v = n.as_floating_point()->get();
      break;
    case Kind::kString:
    case Kind::kChoice:
      if (n.is_string()) v = std::string(n.as_string()->get());
      break;
    case Kind::kIntOrChoice:
      if (n.is_integer()) v = n.as_integer()->get();
      if (n.is_string()) v = std::string(n.as_string()->get());
      break;
  }
  if (!v) {
    error = expected(f) + ", got " + std::string(node_type_name(n));
    return std::nullopt;
  }
  if (const auto* s = std::get_if<std::string>(&*v); s != nullptr && f.kind != Kind::kString) {
    error = check_choice(f, *s);
    if (!error.empty() && f.check) {
      const std::string specific = f.check(*v);  // a field's own message explains better when it has one
      if (!specific.empty()) error = specific;
    }
    if (!error.empty()) return std::nullopt;
  }
  return v;
}

bool parse_int(std::string_view s, int64_t& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  auto res = std::from_chars(s.data(), s.data() + s.size(), out);
  return res.ec == std::errc() && res.ptr == s.data() + s.size() && !s.empty();
}

// A flag's text as the field's type.
std::optional<Value> value_from_text(const Field& f, std::string_view text, std::string& error) {
  std::optional<Value> v;
  switch (f.kind) {
    case Kind::kBool:
      if (text == "true" || text == "True" || text == "1") v = true;
      if (text == "false" || text == "False" || text == "0") v = false;
      break;
    case Kind::kInt: {
      int64_t i = 0;
      if (parse_int(text, i)) v = i;
      break;
    }
    case Kind::kFloat: {
      double d = 0;
      std::string_view t = text;
      if (!t.empty() && t.front() == '+') t.remove_prefix(1);
      auto res = std::from_chars(t.data(), t.data() + t.size(), d);
      if (res.ec == std::errc() && res.ptr == t.data() + t.size() && !t.empty() && std::isfinite(d)) v = d;
      break;
    }
    case Kind::kString:
    case Kind::kChoice:
      v = std::string(text);
      break;
    case Kind::kIntOrChoice: {
      int64_t i = 0;
      if (parse_int(text, i)) {
        v = i;
      } else {
        v = std::string(text);
      }
      break;
    }
  }
  if (!v) {
    error = expected(f) + ", got '" + std::string(text) + "'";
    return std::nullopt;
  }
  if (const auto* s = std::get_if<std::string>(&*v); s != nullptr && f.kind != Kind::kString) {
    error = check_choice(f, *s);
    if (!error.empty() && f.check) {
      const std::string specific = f.check(*v);
      if (!specific.empty()) error = specific;
    }
    if (!error.empty()) return std::nullopt;
  }
  return v;
}

// Type-checked value -> field check -> store. `where` prefixes errors ("file:12: " or "--").
void assign(TrainConfig& c, const Field& f, const Value& v, const std::string& where) {
  if (f.check) {
    const std::string problem = f.check(v);
    if (!problem.empty()) throw ConfigError(where + f.full_name() + ": " + problem);
  }
  f.set(c, v);
}

void apply_table(TrainConfig& c, const toml::table& root, std::string_view source) {
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const auto sections = section_names();
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      throw ConfigError(tu::where(source, section_node.source()) + "unknown section [" + section +
                        "] (known: " + join(sections, ", ") + ")");
    }
    const toml::table* table = section_node.as_table();
    if (table == nullptr) {
      throw ConfigError(tu::where(source, section_node.source()) + "'" + section + "' must be a table [" + section +
                        "], got " + std::string(node_type_name(section_node)));
    }
    for (const auto& [key, node] : *table) {
      const Field* f = find_field(section, key.str());
      const std::string where = tu::where(source, node.source());
      if (f == nullptr) {
        throw ConfigError(where + "unknown key '" + section + "." + std::string(key.str()) + "' (keys of [" + section +
                          "]: " + join(keys_of(section), ", ") + ")");
      }
      std::string error;
      auto v = value_from_node(*f, node, error);
      if (!v) throw ConfigError(where + f->full_name() + ": " + error);
      assign(c, *f, *v, where);
    }
  }
}

}  // namespace

TrainConfig parse_train_config(std::string_view toml_text, std::string_view source) {
  toml::table root;
  try {
    root = tu::parse(toml_text, source);
  } catch (const InputError& e) {
    throw ConfigError(e.what());
  }
  TrainConfig c;
  apply_table(c, root, source);
  return c;
}

TrainConfig load_train_config_file(const std::string& path) {
  std::string text;
  try {
    text = tu::read_file(path);
  } catch (const InputError& e) {
    throw ConfigError(std::string(e.what()) + " (--config)");
  }
  return parse_train_config(text, path);
}

void apply_override(TrainConfig& config, std::string_view flag, std::string_view value) {
  if (flag.starts_with("--")) flag.remove_prefix(2);
  const Field* f = find_field(flag);
  if (f == nullptr) throw ConfigError("unknown option '--" + std::string(flag) + "' (see --help)");
  std::string error;
  auto v = value_from_text(*f, value, error);
  const std::string where = "--";
  if (!v) throw ConfigError(where + f->full_name() + ": " + error);
  assign(config, *f, *v, where);
}

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine cl;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      cl.help = true;
      continue;
    }
    if (arg == "--print-config") {
      cl.print_config = true;
      continue;
    }
    if (!arg.starts_with("--") || arg.size() == 2) {
      throw ConfigError("unexpected argument '" + std::string(arg) +
                        "' (options look like --training.steps 20; see --help)");
    }
    std::string name(arg.substr(2));
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "trace") name = "metrics.trace_file";  // the short form the job's docs use: --trace FILE.json
    const bool is_config = name == "config" || name == "job.config_file";
    const Field* f = is_config ? nullptr : find_field(name);
    if (!is_config && f == nullptr) throw ConfigError("unknown option '--" + name + "' (see --help)");
    if (!value) {
      const bool next_is_flag = i + 1 >= argc || std::string_view(argv[i + 1]).starts_with("--");
      if (f != nullptr && f->kind == Kind::kBool && next_is_flag) {
        value = "true";
      } else if (i + 1 >= argc) {
        throw ConfigError("option '--" + name + "' needs a value");
      } else {
        value = argv[++i];
      }
    }
    if (is_config) {
      cl.config_file = *value;
    } else {
      cl.overrides.emplace_back(name, *value);
    }
  }
  return cl;
}

TrainConfig load_train_config(const CommandLine& command_line) {
  TrainConfig c = command_line.config_file ? load_train_config_file(*command_line.config_file) : TrainConfig{};
  for (const auto& [flag, value] : command_line.overrides) apply_override(c, flag, value);
  return c;
}

}  // namespace fsdp::train
