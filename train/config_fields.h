// The table of fsdp-train's configuration keys: every key declared once, with its type, default,
// help text and checks. The TOML/CLI reader (config_reader.cc), to_toml(), the usage text and the
// docs table all walk it. Internal to train/.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "train/config.h"

namespace fsdp::train::config_table {

// A key's value before it lands in the struct: what TOML or a flag gave, already type-checked.
using Value = std::variant<bool, int64_t, double, std::string>;

// kList: a TOML array (or, as TorchTitan's `list[str] | str`, a string), kept as its TOML literal; a
// flag gives it comma-separated.
enum class Kind { kBool, kInt, kFloat, kString, kChoice, kIntOrChoice, kList };

// One configuration key, declared once: parsing, overrides, help text, to_toml() and the docs table
// all walk the same list.
struct Field {
  std::string section;
  std::string key;
  Kind kind;
  std::vector<std::string> choices;  // kChoice, kIntOrChoice
  bool torchtitan = false;
  std::string help;
  std::function<void(TrainConfig&, const Value&)> set;
  std::function<std::string(const TrainConfig&)> get;  // TOML literal of the current value; "" if unset
  std::function<std::string(const Value&)> check;      // "" when fine, else what is wrong ("must be > 0")
  // Non-empty: the key is TorchTitan's and accepted, but has no effect in this runtime, for this reason
  // (the start-up line groups given keys by it).
  std::string no_effect;

  // Sections may nest ("quantize.linear.float8"); the key never holds a dot.
  std::string full_name() const { return section + "." + key; }
};

// Every key, in the order sections and keys are printed.
const std::vector<Field>& fields();
const Field* find_field(std::string_view section, std::string_view key);
const Field* find_field(std::string_view dotted);  // "training.steps", "quantize.linear.float8.emulate"
std::vector<std::string> section_names();
// True when `dotted` is a section or the parent of nested ones ("quantize", "quantize.linear").
bool is_section_or_parent(std::string_view dotted);
std::vector<std::string> keys_of(std::string_view section);
// "int", "float", "bool", "string", or the choices "a|b|c".
std::string type_name(const Field& f);
std::string join(const std::vector<std::string>& items, std::string_view sep);
// Several problems as one ConfigError: one alone as it is, more one per line under "N errors:".
[[noreturn]] void throw_config_errors(const std::vector<std::string>& problems);
// A checked value as a TOML literal of the field's kind (a kList value already is one).
std::string literal(Kind kind, const Value& v);

// TorchTitan's JobConfig keys (v0.2.x) that have no counterpart in TrainConfig: accepted, type-checked,
// kept in TrainConfig::torchtitan_only, and either without effect (Field::no_effect says why) or, for
// the tensor/pipeline/context/expert parallel degrees, accepted at 1 and refused above it.
void add_torchtitan_only_fields(std::vector<Field>& fields);

// TorchTitan's llama3 flavor names mapped to the planner's presets ({"8B", "llama3-8b"}, ...).
const std::vector<std::pair<std::string, std::string>>& flavor_aliases();

}  // namespace fsdp::train::config_table
