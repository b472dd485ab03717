// Reading a configuration: TOML documents and `--section.key value` flags, each value type-checked
// against the key table (config_fields.h) with errors naming the file:line or the flag.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

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
    case Kind::kList:
      return "expected an array";
  }
  return "";
}

// "" when `s` is an allowed choice, else the complaint.
std::string check_choice(const Field& f, const std::string& s) {
  if (std::find(f.choices.begin(), f.choices.end(), s) != f.choices.end()) return "";
  return "'" + s + "' is not one of " + join(f.choices, ", ");
}

// toml++'s own printing, so a list reads back and prints the same ("[ 'model', 'loss' ]").
std::string array_literal(const toml::array& items) {
  std::ostringstream text;
  text << items;
  return text.str();
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
    case Kind::kList:  // kept as its TOML literal; TorchTitan's `list[str] | str` also takes one string
      if (n.is_array()) v = array_literal(*n.as_array());
      if (n.is_string()) v = literal(Kind::kString, std::string(n.as_string()->get()));
      break;
  }
  if (!v) {
    error = expected(f) + ", got " + std::string(node_type_name(n));
    return std::nullopt;
  }
  if (const auto* s = std::get_if<std::string>(&*v); s != nullptr && f.kind != Kind::kString && f.kind != Kind::kList) {
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
    case Kind::kList: {  // TorchTitan's command-line form: comma-separated items
      toml::array items;
      for (size_t start = 0; !text.empty() && start <= text.size();) {
        const size_t comma = std::min(text.find(',', start), text.size());
        items.push_back(std::string(text.substr(start, comma - start)));
        start = comma + 1;
      }
      v = array_literal(items);
      break;
    }
  }
  if (!v) {
    error = expected(f) + ", got '" + std::string(text) + "'";
    return std::nullopt;
  }
  if (const auto* s = std::get_if<std::string>(&*v); s != nullptr && f.kind != Kind::kString && f.kind != Kind::kList) {
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
  const std::string name = f.full_name();
  // "job.toml:12: " -> "job.toml:12"; a flag ("--") has no line.
  c.key_lines[name] = where.ends_with(": ") ? where.substr(0, where.size() - 2) : "";
  if (!f.no_effect.empty() &&
      std::find(c.no_effect_keys.begin(), c.no_effect_keys.end(), name) == c.no_effect_keys.end()) {
    c.no_effect_keys.push_back(name);
  }
}

// A mistake's message or a key's name with its position in the document, to put them in file order
// (toml++ walks a table's keys sorted by name).
struct Positioned {
  toml::source_position at;
  std::string text;
};

// One key (or nested table) of table `prefix` ("" at the root, where keys are sections).
// `given` collects the position of each key set, to put TrainConfig::no_effect_keys in file order.
void apply_node(TrainConfig& c, const std::string& prefix, std::string_view key, const toml::node& node,
                std::string_view source, std::vector<Positioned>& mistakes, std::vector<Positioned>& given) {
  const std::string where = tu::where(source, node.source());
  const std::string dotted = prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
  const Field* f = prefix.empty() ? nullptr : find_field(prefix, key);
  if (f == nullptr && is_section_or_parent(dotted)) {
    const toml::table* table = node.as_table();
    if (table == nullptr) {
      mistakes.push_back({node.source().begin, where + "'" + dotted + "' must be a table [" + dotted + "], got " +
                                                   std::string(node_type_name(node))});
      return;
    }
    for (const auto& [k, n] : *table) apply_node(c, dotted, k.str(), n, source, mistakes, given);
    return;
  }
  if (f == nullptr) {
    const std::string message =
        prefix.empty() ? "unknown section [" + dotted + "] (known: " + join(section_names(), ", ") + ")"
                       : "unknown key '" + dotted + "' (keys of [" + prefix + "]: " + join(keys_of(prefix), ", ") + ")";
    mistakes.push_back({node.source().begin, where + message});
    return;
  }
  std::string error;
  auto v = value_from_node(*f, node, error);
  if (!v) {
    mistakes.push_back({node.source().begin, where + f->full_name() + ": " + error});
    return;
  }
  try {
    assign(c, *f, *v, where);
    given.push_back({node.source().begin, f->full_name()});
  } catch (const ConfigError& e) {
    mistakes.push_back({node.source().begin, e.what()});
  }
}

void sort_by_position(std::vector<Positioned>& items) {
  std::stable_sort(items.begin(), items.end(), [](const Positioned& a, const Positioned& b) {
    return a.at.line != b.at.line ? a.at.line < b.at.line : a.at.column < b.at.column;
  });
}

void apply_table(TrainConfig& c, const toml::table& root, std::string_view source) {
  std::vector<Positioned> mistakes, given;
  for (const auto& [key, node] : root) apply_node(c, "", key.str(), node, source, mistakes, given);
  sort_by_position(given);
  std::vector<std::string> in_file_order;
  for (const auto& g : given) {
    if (std::find(c.no_effect_keys.begin(), c.no_effect_keys.end(), g.text) != c.no_effect_keys.end()) {
      in_file_order.push_back(g.text);
    }
  }
  c.no_effect_keys = std::move(in_file_order);  // a document is read over the defaults: these are all
  if (mistakes.empty()) return;
  sort_by_position(mistakes);
  std::vector<std::string> problems;
  for (const auto& m : mistakes) problems.push_back(m.text);
  throw_config_errors(problems);
}

// A ConfigError's lines, without the "N errors:" head, for merging with more.
void add_problems(const ConfigError& e, std::vector<std::string>& problems) {
  std::istringstream lines(e.what());
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    const bool is_head = first && line.ends_with(" errors:");
    first = false;
    if (is_head) continue;
    problems.push_back(line.starts_with("  ") ? line.substr(2) : line);
  }
}

}  // namespace

namespace config_table {

void throw_config_errors(const std::vector<std::string>& problems) {
  if (problems.size() == 1) throw ConfigError(problems.front());
  std::string message = std::to_string(problems.size()) + " errors:";
  for (const auto& p : problems) message += "\n  " + p;
  throw ConfigError(message);
}

}  // namespace config_table

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
  std::vector<std::string> problems;
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
      problems.push_back("unexpected argument '" + std::string(arg) +
                         "' (options look like --training.steps 20; see --help)");
      continue;
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
    if (!is_config && f == nullptr && !value) {
      // TorchTitan's `--section.no_key`: a boolean key set to false.
      const auto dot = name.rfind('.');
      const std::string_view key = std::string_view(name).substr(dot == std::string::npos ? 0 : dot + 1);
      const Field* negated = dot == std::string::npos || !key.starts_with("no_")
                                 ? nullptr
                                 : find_field(name.substr(0, dot) + "." + std::string(key.substr(3)));
      if (negated != nullptr && negated->kind == Kind::kBool) {
        cl.overrides.emplace_back(negated->full_name(), "false");
        continue;
      }
    }
    if (!is_config && f == nullptr) {
      problems.push_back("unknown option '--" + name + "' (see --help)");
      if (!value && i + 1 < argc && !std::string_view(argv[i + 1]).starts_with("--")) ++i;  // its value
      continue;
    }
    if (!value) {
      const bool next_is_flag = i + 1 >= argc || std::string_view(argv[i + 1]).starts_with("--");
      if (f != nullptr && f->kind == Kind::kBool && next_is_flag) {
        value = "true";
      } else if (i + 1 >= argc) {
        problems.push_back("option '--" + name + "' needs a value");
        continue;
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
  if (!problems.empty()) throw_config_errors(problems);
  return cl;
}

TrainConfig load_train_config(const CommandLine& command_line) {
  std::vector<std::string> problems;
  TrainConfig c;
  if (command_line.config_file) {
    try {
      c = load_train_config_file(*command_line.config_file);
    } catch (const ConfigError& e) {
      add_problems(e, problems);
    }
  }
  for (const auto& [flag, value] : command_line.overrides) {
    try {
      apply_override(c, flag, value);
    } catch (const ConfigError& e) {
      problems.push_back(e.what());
    }
  }
  if (!problems.empty()) throw_config_errors(problems);
  return c;
}

}  // namespace fsdp::train
