#include "train/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <variant>

#include "common/json.h"
#include "sharding/plan_error.h"
#include "sharding/toml_util.h"
#include "train/output_util.h"

namespace fsdp::train {
namespace {

namespace tu = sharding::toml_util;

// A key's value before it lands in the struct: what TOML or a flag gave, already type-checked.
using Value = std::variant<bool, int64_t, double, std::string>;

enum class Kind { kBool, kInt, kFloat, kString, kChoice, kIntOrChoice };

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

  std::string full_name() const { return section + "." + key; }
};

std::string float_literal(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = json::number(v);  // reads back exactly
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // TOML needs a float to look like one
  return s;
}

// TOML basic strings take JSON's escapes.
std::string string_literal(std::string_view v) { return json::quote(v); }

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : std::string(sep)) + i;
  return s;
}

// ---- field builders: an accessor lambda per key keeps the table one line of intent per key ----

using Check = std::function<std::string(const Value&)>;
template <class T>
using Accessor = T& (*)(TrainConfig&);

template <class T>
T& access(Accessor<T> acc, const TrainConfig& c) {
  return acc(const_cast<TrainConfig&>(c));  // read-only use of the const config
}

Field int_field(std::string section, std::string key, Accessor<int64_t> acc, bool tt, std::string help,
                Check check = {}) {
  return Field{std::move(section), std::move(key), Kind::kInt, {}, tt, std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<int64_t>(v); },
               [acc](const TrainConfig& c) { return std::to_string(access(acc, c)); }, std::move(check)};
}

Field opt_int_field(std::string section, std::string key, Accessor<std::optional<int64_t>> acc, bool tt,
                    std::string help, Check check = {}) {
  return Field{std::move(section), std::move(key), Kind::kInt, {}, tt, std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<int64_t>(v); },
               [acc](const TrainConfig& c) {
                 const auto& v = access(acc, c);
                 return v ? std::to_string(*v) : std::string();
               },
               std::move(check)};
}

Field float_field(std::string section, std::string key, Accessor<double> acc, bool tt, std::string help,
                  Check check = {}) {
  return Field{std::move(section), std::move(key), Kind::kFloat, {}, tt, std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<double>(v); },
               [acc](const TrainConfig& c) { return float_literal(access(acc, c)); }, std::move(check)};
}

Field opt_float_field(std::string section, std::string key, Accessor<std::optional<double>> acc, bool tt,
                      std::string help, Check check = {}) {
  return Field{std::move(section), std::move(key), Kind::kFloat, {}, tt, std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<double>(v); },
               [acc](const TrainConfig& c) {
                 const auto& v = access(acc, c);
                 return v ? float_literal(*v) : std::string();
               },
               std::move(check)};
}

Field bool_field(std::string section, std::string key, Accessor<bool> acc, bool tt, std::string help) {
  return Field{std::move(section), std::move(key), Kind::kBool, {}, tt, std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<bool>(v); },
               [acc](const TrainConfig& c) { return std::string(access(acc, c) ? "true" : "false"); }, {}};
}

Field string_field(std::string section, std::string key, Accessor<std::string> acc, bool tt, std::string help,
                   Check check = {}) {
  return Field{std::move(section), std::move(key), Kind::kString, {}, tt, std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<std::string>(v); },
               [acc](const TrainConfig& c) { return string_literal(access(acc, c)); }, std::move(check)};
}

Field choice_field(std::string section, std::string key, Accessor<std::string> acc, std::vector<std::string> choices,
                   bool tt, std::string help) {
  Field f = string_field(std::move(section), std::move(key), acc, tt, std::move(help));
  f.kind = Kind::kChoice;
  f.choices = std::move(choices);
  return f;
}

std::string positive(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i > 0 ? "" : "must be positive";
  return std::get<double>(v) > 0 ? "" : "must be positive";
}
std::string non_negative(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i >= 0 ? "" : "must be >= 0";
  const double d = std::get<double>(v);
  return d >= 0 && std::isfinite(d) ? "" : "must be a finite number >= 0";
}
std::string unit_interval(const Value& v) {
  const double d = std::get<double>(v);
  return d >= 0 && d <= 1 ? "" : "must be in [0, 1]";
}
std::string beta(const Value& v) {
  const double d = std::get<double>(v);
  return d >= 0 && d < 1 ? "" : "must be in [0, 1)";
}
std::string degree(const Value& v) {
  const int64_t i = std::get<int64_t>(v);
  return i == -1 || i >= 1 ? "" : "must be -1 (the rest of the world) or >= 1";
}
std::string minus_one_or_non_negative(const Value& v) {
  return std::get<int64_t>(v) >= -1 ? "" : "must be -1 or >= 0";
}
std::string global_batch(const Value& v) {
  const int64_t i = std::get<int64_t>(v);
  return i == -1 || i >= 1 ? "" : "must be -1 (local_batch_size x dp degree) or >= 1";
}
std::string activation_mode(const Value& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "none") return "";
  if (s == "selective" || s == "full") {
    return "'" + s +
           "' is a TorchTitan mode the reference model does not support (it keeps every activation); "
           "use \"none\"";
  }
  return "'" + s + "' is not a mode (TorchTitan's are none, selective, full; only none is supported here)";
}

// TorchTitan's llama3 flavor names mapped to the planner's presets.
const std::vector<std::pair<std::string, std::string>>& flavor_aliases() {
  static const std::vector<std::pair<std::string, std::string>> kAliases = {
      {"8B", "llama3-8b"}, {"70B", "llama3-70b"}, {"405B", "llama3-405b"}};
  return kAliases;
}

std::vector<std::string> flavor_choices() {
  std::vector<std::string> c = {"debugmodel"};
  for (const auto& [alias, preset] : flavor_aliases()) c.push_back(alias);
  for (const auto& p : sharding::model_preset_names()) {
    if (p != "debugmodel") c.push_back(p);  // the planner's preset of the same model
  }
  return c;
}

#define FSDP_ACC(type, member) [](TrainConfig& c) -> type& { return c.member; }

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = [] {
    std::vector<Field> f;
    // [job]
    f.push_back(string_field("job", "dump_folder", FSDP_ACC(std::string, job.dump_folder), true,
                             "folder for checkpoints, metrics and traces (relative paths are under it)"));
    f.push_back(string_field("job", "description", FSDP_ACC(std::string, job.description), true,
                             "free text printed at start-up"));
    // [model]
    f.push_back(choice_field("model", "name", FSDP_ACC(std::string, model.name), {"llama3"}, true,
                             "model architecture"));
    f.push_back(choice_field("model", "flavor", FSDP_ACC(std::string, model.flavor), flavor_choices(), true,
                             "size preset: debugmodel (ours: byte vocab, trains on 2 CPU cores), TorchTitan's "
                             "8B/70B/405B, or a planner preset"));
    f.push_back(opt_int_field("model", "dim", FSDP_ACC(std::optional<int64_t>, model.dim), false,
                              "hidden size (overrides the flavor)", positive));
    f.push_back(opt_int_field("model", "n_layers", FSDP_ACC(std::optional<int64_t>, model.n_layers), false,
                              "transformer blocks (overrides the flavor)", positive));
    f.push_back(opt_int_field("model", "n_heads", FSDP_ACC(std::optional<int64_t>, model.n_heads), false,
                              "attention heads (overrides the flavor)", positive));
    f.push_back(opt_int_field("model", "n_kv_heads", FSDP_ACC(std::optional<int64_t>, model.n_kv_heads), false,
                              "key/value heads, GQA (overrides the flavor)", positive));
    f.push_back(opt_int_field("model", "vocab_size", FSDP_ACC(std::optional<int64_t>, model.vocab_size), false,
                              "vocabulary size (overrides the flavor)", positive));
    f.push_back(opt_int_field("model", "multiple_of", FSDP_ACC(std::optional<int64_t>, model.multiple_of), false,
                              "FFN width rounds up to a multiple of this (overrides the flavor)", positive));
    f.push_back(opt_float_field("model", "ffn_dim_multiplier",
                                FSDP_ACC(std::optional<double>, model.ffn_dim_multiplier), false,
                                "FFN width multiplier (overrides the flavor)", positive));
    f.push_back(float_field("model", "norm_eps", FSDP_ACC(double, model.norm_eps), false, "RMSNorm epsilon",
                            positive));
    f.push_back(float_field("model", "rope_theta", FSDP_ACC(double, model.rope_theta), false,
                            "rotary embedding base", positive));
    // [training]
    f.push_back(int_field("training", "local_batch_size", FSDP_ACC(int64_t, training.local_batch_size), true,
                          "sequences per data-parallel rank per micro-step", positive));
    f.push_back(int_field("training", "seq_len", FSDP_ACC(int64_t, training.seq_len), true, "tokens per sequence",
                          positive));
    f.push_back(int_field("training", "steps", FSDP_ACC(int64_t, training.steps), true, "optimizer steps to run",
                          positive));
    f.push_back(float_field("training", "max_norm", FSDP_ACC(double, training.max_norm), true,
                            "clip gradients to this global L2 norm; 0 disables", non_negative));
    f.push_back(int_field("training", "global_batch_size", FSDP_ACC(int64_t, training.global_batch_size), true,
                          "sequences per optimizer step over all ranks; -1 = local_batch_size x dp degree x "
                          "gradient_accumulation_steps",
                          global_batch));
    f.push_back(int_field("training", "gradient_accumulation_steps",
                          FSDP_ACC(int64_t, training.gradient_accumulation_steps), false,
                          "micro-steps per optimizer step (TorchTitan derives it from global_batch_size, "
                          "which wins when both are given and must agree)",
                          positive));
    f.push_back(choice_field("training", "mixed_precision_param",
                             FSDP_ACC(std::string, training.mixed_precision_param), {"bfloat16", "float32"}, true,
                             "dtype parameters are all-gathered and computed in"));
    f.push_back(choice_field("training", "mixed_precision_reduce",
                             FSDP_ACC(std::string, training.mixed_precision_reduce), {"float32", "bfloat16"}, true,
                             "dtype gradients are reduce-scattered in"));
    f.push_back(int_field("training", "seed", FSDP_ACC(int64_t, training.seed), true,
                          "seed of initialisation and data order (TorchTitan: unset = random; here 0)",
                          non_negative));
    f.push_back(bool_field("training", "deterministic", FSDP_ACC(bool, training.deterministic), true,
                           "bitwise-reproducible kernels and reduction order"));
    f.push_back(choice_field("training", "dataset", FSDP_ACC(std::string, training.dataset),
                             {"tiny_corpus", "synthetic"}, true,
                             "tiny_corpus (bundled English text, byte tokens) or synthetic (seeded Markov chain)"));
    f.push_back(bool_field("training", "skip_nonfinite_steps", FSDP_ACC(bool, training.skip_nonfinite_steps), false,
                           "skip the optimizer step on a NaN/Inf loss or grad norm instead of stopping"));
    // [optimizer]
    f.push_back(choice_field("optimizer", "name", FSDP_ACC(std::string, optimizer.name), {"AdamW", "SGD"}, true,
                             "optimizer"));
    f.push_back(float_field("optimizer", "lr", FSDP_ACC(double, optimizer.lr), true, "peak learning rate",
                            non_negative));
    f.push_back(float_field("optimizer", "eps", FSDP_ACC(double, optimizer.eps), true, "AdamW epsilon", positive));
    f.push_back(float_field("optimizer", "beta1", FSDP_ACC(double, optimizer.beta1), true, "AdamW beta1", beta));
    f.push_back(float_field("optimizer", "beta2", FSDP_ACC(double, optimizer.beta2), true, "AdamW beta2", beta));
    f.push_back(float_field("optimizer", "weight_decay", FSDP_ACC(double, optimizer.weight_decay), true,
                            "decoupled weight decay (AdamW) or L2 (SGD)", non_negative));
    f.push_back(float_field("optimizer", "momentum", FSDP_ACC(double, optimizer.momentum), false, "SGD momentum",
                            beta));
    // [lr_scheduler]
    f.push_back(int_field("lr_scheduler", "warmup_steps", FSDP_ACC(int64_t, lr_scheduler.warmup_steps), true,
                          "linear warm-up steps", non_negative));
    f.push_back(opt_float_field("lr_scheduler", "decay_ratio", FSDP_ACC(std::optional<double>, lr_scheduler.decay_ratio),
                                true, "fraction of steps spent decaying at the end; unset = all after warm-up",
                                unit_interval));
    f.push_back(choice_field("lr_scheduler", "decay_type", FSDP_ACC(std::string, lr_scheduler.decay_type),
                             {"linear", "cosine", "sqrt"}, true, "decay shape"));
    f.push_back(float_field("lr_scheduler", "min_lr_factor", FSDP_ACC(double, lr_scheduler.min_lr_factor), true,
                            "decay floor as a fraction of lr", unit_interval));
    // [parallelism]
    f.push_back(int_field("parallelism", "data_parallel_replicate_degree",
                          FSDP_ACC(int64_t, parallelism.data_parallel_replicate_degree), true,
                          "HSDP replica groups (parameters replicated across them); -1 = the rest of the world",
                          degree));
    f.push_back(int_field("parallelism", "data_parallel_shard_degree",
                          FSDP_ACC(int64_t, parallelism.data_parallel_shard_degree), true,
                          "ranks one FSDP shard group spans; -1 = the rest of the world", degree));
    {
      Field r{"parallelism",
              "fsdp_reshard_after_forward",
              Kind::kIntOrChoice,
              {"default", "always", "never"},
              true,
              "free gathered parameters after forward: default (all units but the last), always, never, or "
              "(ours) an integer group size to keep them gathered within",
              [](TrainConfig& c, const Value& v) {
                auto& m = c.parallelism.fsdp_reshard_after_forward;
                if (const auto* i = std::get_if<int64_t>(&v)) {
                  m = {ReshardAfterForward::Mode::kGroup, *i};
                  return;
                }
                const auto& s = std::get<std::string>(v);
                m.group_size = 0;
                m.mode = s == "always" ? ReshardAfterForward::Mode::kAlways
                         : s == "never" ? ReshardAfterForward::Mode::kNever
                                        : ReshardAfterForward::Mode::kDefault;
              },
              [](const TrainConfig& c) {
                const auto& m = c.parallelism.fsdp_reshard_after_forward;
                return m.mode == ReshardAfterForward::Mode::kGroup ? m.to_string() : string_literal(m.to_string());
              },
              [](const Value& v) {
                const auto* i = std::get_if<int64_t>(&v);
                return i == nullptr || *i >= 1 ? std::string() : std::string("a group size must be >= 1");
              }};
      f.push_back(std::move(r));
    }
    f.push_back(int_field("parallelism", "prefetch", FSDP_ACC(int64_t, parallelism.prefetch), false,
                          "units all-gathered ahead of the one computing", non_negative));
    f.push_back(string_field("parallelism", "plan_file", FSDP_ACC(std::string, parallelism.plan_file), false,
                             "a plan from `fsdp-plan --out FILE` (.txtpb: text); the job refuses it, naming each "
                             "difference, unless it matches this model, mesh and policy; empty = plan here"));
    // [checkpoint]
    f.push_back(bool_field("checkpoint", "enable_checkpoint", FSDP_ACC(bool, checkpoint.enable_checkpoint), true,
                           "save and resume checkpoints"));
    f.push_back(string_field("checkpoint", "folder", FSDP_ACC(std::string, checkpoint.folder), true,
                             "checkpoint folder under job.dump_folder"));
    f.push_back(int_field("checkpoint", "interval", FSDP_ACC(int64_t, checkpoint.interval), true,
                          "steps between checkpoints", positive));
    f.push_back(int_field("checkpoint", "keep_latest_k", FSDP_ACC(int64_t, checkpoint.keep_latest_k), true,
                          "checkpoints kept; 0 keeps all", non_negative));
    f.push_back(int_field("checkpoint", "load_step", FSDP_ACC(int64_t, checkpoint.load_step), true,
                          "step to resume from; -1 = the latest found", minus_one_or_non_negative));
    f.push_back(string_field("checkpoint", "initial_load_path", FSDP_ACC(std::string, checkpoint.initial_load_path),
                             true, "another run's checkpoint folder to start from when `folder` has none (resharded "
                             "to this run's layout; load_step picks the step)"));
    f.push_back(choice_field("checkpoint", "async_mode", FSDP_ACC(std::string, checkpoint.async_mode),
                             {"disabled", "async"}, true, "write checkpoints on a background thread"));
    // [metrics]
    f.push_back(int_field("metrics", "log_freq", FSDP_ACC(int64_t, metrics.log_freq), true,
                          "print a metrics line every this many steps (and at step 1)", positive));
    f.push_back(bool_field("metrics", "save_for_all_ranks", FSDP_ACC(bool, metrics.save_for_all_ranks), true,
                           "every rank writes its own metrics file (FILE.rank<r>.EXT), not only rank 0"));
    f.push_back(string_field("metrics", "file", FSDP_ACC(std::string, metrics.file), false,
                             "per-step records: JSONL, or CSV when the name ends in .csv; empty = none"));
    f.push_back(string_field("metrics", "trace_file", FSDP_ACC(std::string, metrics.trace_file), false,
                             "Chrome/Perfetto trace of every rank, merged into one file by rank 0 (--trace FILE is short for it); empty = off"));
    // [activation_checkpoint]
    f.push_back(string_field("activation_checkpoint", "mode", FSDP_ACC(std::string, activation_checkpoint.mode), true,
                             "recompute activations in backward: only none is supported (TorchTitan default: "
                             "selective)",
                             activation_mode));
    f.back().kind = Kind::kChoice;
    f.back().choices = {"none"};
    return f;
  }();
  return kFields;
}

#undef FSDP_ACC

const Field* find_field(std::string_view section, std::string_view key) {
  for (const auto& f : fields()) {
    if (f.section == section && f.key == key) return &f;
  }
  return nullptr;
}

const Field* find_field(std::string_view dotted) {
  const auto dot = dotted.find('.');
  if (dot == std::string_view::npos) return nullptr;
  return find_field(dotted.substr(0, dot), dotted.substr(dot + 1));
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
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kChoice: return join(f.choices, "|");
    case Kind::kIntOrChoice: return join(f.choices, "|") + "|int";
  }
  return "?";
}

std::string_view node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date/time";
  }
}

std::string expected(const Field& f) {
  switch (f.kind) {
    case Kind::kBool: return "expected true or false";
    case Kind::kInt: return "expected an integer";
    case Kind::kFloat: return "expected a number";
    case Kind::kString: return "expected a string";
    case Kind::kChoice: return "expected one of " + join(f.choices, ", ");
    case Kind::kIntOrChoice: return "expected an integer or one of " + join(f.choices, ", ");
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

bool is_preset_flavor(std::string_view flavor) { return flavor != "debugmodel"; }

std::string preset_name(std::string_view flavor) {
  for (const auto& [alias, preset] : flavor_aliases()) {
    if (alias == flavor) return preset;
  }
  return std::string(flavor);
}

}  // namespace

// ---- TrainConfig ----

DataType TrainingConfig::param_dtype() const {
  return mixed_precision_param == "bfloat16" ? DataType::kBfloat16 : DataType::kFloat32;
}
DataType TrainingConfig::reduce_dtype() const {
  return mixed_precision_reduce == "bfloat16" ? DataType::kBfloat16 : DataType::kFloat32;
}

std::string ReshardAfterForward::to_string() const {
  switch (mode) {
    case Mode::kDefault: return "default";
    case Mode::kAlways: return "always";
    case Mode::kNever: return "never";
    case Mode::kGroup: return std::to_string(group_size);
  }
  return "?";
}

bool ReshardAfterForward::reshards(int64_t unit, int64_t num_units) const {
  switch (mode) {
    case Mode::kDefault: return unit + 1 < num_units;
    case Mode::kAlways: return true;
    case Mode::kNever: return false;
    case Mode::kGroup: return true;  // to the smaller group; the engine reads group_size
  }
  return true;
}

sharding::LlamaConfig debug_model_llama_config() { return sharding::debug_model_config(); }

sharding::LlamaConfig TrainConfig::llama_config() const {
  sharding::LlamaConfig c;
  if (!is_preset_flavor(model.flavor)) {
    c = debug_model_llama_config();
  } else {
    const sharding::ModelSpec preset = sharding::model_preset(preset_name(model.flavor));
    const auto& d = preset.dims;
    c = sharding::LlamaConfig{.dim = d.dim,
                              .layers = d.layers,
                              .n_heads = d.n_heads,
                              .n_kv_heads = d.n_kv_heads,
                              .vocab = d.vocab,
                              // The preset's rounding knobs are not exposed by sharding/; rounding up to
                              // its own FFN width reproduces that width exactly while dim is unchanged.
                              .multiple_of = d.ffn_hidden,
                              .ffn_dim_multiplier = 0,
                              .num_experts = d.num_experts,
                              .experts_per_token = d.experts_per_token};
    if (model.dim && *model.dim != d.dim && !model.multiple_of) {
      throw ConfigError("model.dim = " + std::to_string(*model.dim) + " overrides flavor '" + model.flavor +
                        "' (dim " + std::to_string(d.dim) +
                        "): also set model.multiple_of (and model.ffn_dim_multiplier) so the FFN width is defined");
    }
    if (model.multiple_of && !model.ffn_dim_multiplier) c.ffn_dim_multiplier = 0;
  }
  if (model.dim) c.dim = *model.dim;
  if (model.n_layers) c.layers = *model.n_layers;
  if (model.n_heads) c.n_heads = *model.n_heads;
  if (model.n_kv_heads) c.n_kv_heads = *model.n_kv_heads;
  if (model.vocab_size) c.vocab = *model.vocab_size;
  if (model.multiple_of) c.multiple_of = *model.multiple_of;
  if (model.ffn_dim_multiplier) c.ffn_dim_multiplier = *model.ffn_dim_multiplier;
  return c;
}

sharding::ModelSpec TrainConfig::model_spec() const {
  const std::string name = is_preset_flavor(model.flavor) ? preset_name(model.flavor) : "llama3-" + model.flavor;
  try {
    return sharding::make_llama(name, llama_config());
  } catch (const sharding::PlanError& e) {
    throw ConfigError(std::string("[model]: ") + e.what());
  }
}

runtime::LrSchedule TrainConfig::lr_schedule() const {
  runtime::LrSchedule s;
  s.lr = optimizer.lr;
  s.total_steps = training.steps;
  s.warmup_steps = lr_scheduler.warmup_steps;
  s.decay = runtime::parse_decay_type(lr_scheduler.decay_type);
  s.min_lr_factor = lr_scheduler.min_lr_factor;
  if (lr_scheduler.decay_ratio) {
    // TorchTitan: round(steps * decay_ratio) decay steps, at most what warm-up leaves; the runtime's
    // ratio is of the post-warm-up steps.
    const int64_t after = std::max<int64_t>(training.steps - lr_scheduler.warmup_steps, 1);
    const double decay_steps = std::round(static_cast<double>(training.steps) * *lr_scheduler.decay_ratio);
    s.decay_ratio = std::min(1.0, decay_steps / static_cast<double>(after));
  }
  return s;
}

std::string TrainConfig::resolve_path(const std::string& path) const {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(job.dump_folder) / path).string();
}

void TrainConfig::validate(int64_t world_size) {
  if (world_size < 1) throw ConfigError("world size must be >= 1, got " + std::to_string(world_size));
  auto& p = parallelism;
  int64_t& rep = p.data_parallel_replicate_degree;
  int64_t& shard = p.data_parallel_shard_degree;
  const std::string ws = std::to_string(world_size);
  if (rep == -1 && shard == -1) {
    throw ConfigError(
        "parallelism.data_parallel_replicate_degree and parallelism.data_parallel_shard_degree are both -1: at most "
        "one may take the rest of the world");
  }
  if (shard == -1) {
    if (world_size % rep != 0) {
      throw ConfigError("parallelism.data_parallel_shard_degree = -1: world size " + ws +
                        " is not divisible by parallelism.data_parallel_replicate_degree = " + std::to_string(rep));
    }
    shard = world_size / rep;
  }
  if (rep == -1) {
    if (world_size % shard != 0) {
      throw ConfigError("parallelism.data_parallel_replicate_degree = -1: world size " + ws +
                        " is not divisible by parallelism.data_parallel_shard_degree = " + std::to_string(shard));
    }
    rep = world_size / shard;
  }
  if (rep * shard != world_size) {
    throw ConfigError("parallelism.data_parallel_replicate_degree (" + std::to_string(rep) +
                      ") x parallelism.data_parallel_shard_degree (" + std::to_string(shard) + ") = " +
                      std::to_string(rep * shard) + ", but the world size is " + ws +
                      " (set one of them to -1 to take the rest)");
  }
  const auto& r = p.fsdp_reshard_after_forward;
  if (r.mode == ReshardAfterForward::Mode::kGroup && (r.group_size > shard || shard % r.group_size != 0)) {
    throw ConfigError("parallelism.fsdp_reshard_after_forward = " + std::to_string(r.group_size) +
                      " must divide parallelism.data_parallel_shard_degree = " + std::to_string(shard));
  }

  auto& t = training;
  const int64_t micro_global = t.local_batch_size * p.dp_degree();
  if (t.global_batch_size > 0) {
    if (t.global_batch_size % micro_global != 0) {
      throw ConfigError("training.global_batch_size = " + std::to_string(t.global_batch_size) +
                        " is not a multiple of training.local_batch_size (" + std::to_string(t.local_batch_size) +
                        ") x dp degree (" + std::to_string(p.dp_degree()) + ") = " + std::to_string(micro_global));
    }
    const int64_t derived = t.global_batch_size / micro_global;
    if (t.gradient_accumulation_steps != 1 && t.gradient_accumulation_steps != derived) {
      throw ConfigError("training.gradient_accumulation_steps = " + std::to_string(t.gradient_accumulation_steps) +
                        " disagrees with training.global_batch_size = " + std::to_string(t.global_batch_size) +
                        ", which implies " + std::to_string(derived) + " (set only one of them)");
    }
    t.gradient_accumulation_steps = derived;
  } else {
    t.global_batch_size = micro_global * t.gradient_accumulation_steps;
  }

  const sharding::LlamaConfig m = llama_config();
  const int64_t kv = m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads;
  if (m.num_experts > 0) {
    throw ConfigError("model.flavor = \"" + model.flavor +
                      "\" is a mixture of experts; the reference model is a dense Llama 3");
  }
  if (m.dim % m.n_heads != 0) {
    throw ConfigError("model.n_heads = " + std::to_string(m.n_heads) + " does not divide model.dim = " +
                      std::to_string(m.dim));
  }
  if (m.n_heads % kv != 0) {
    throw ConfigError("model.n_kv_heads = " + std::to_string(kv) + " does not divide model.n_heads = " +
                      std::to_string(m.n_heads));
  }
  if ((m.dim / m.n_heads) % 2 != 0) {
    throw ConfigError("head dim model.dim / model.n_heads = " + std::to_string(m.dim / m.n_heads) +
                      " must be even for rotary embeddings");
  }
  if (t.dataset == "tiny_corpus" && m.vocab < 256) {
    throw ConfigError("training.dataset = \"tiny_corpus\" needs byte tokens: model.vocab_size must be >= 256, got " +
                      std::to_string(m.vocab));
  }
  if (t.dataset == "synthetic" && m.vocab < 2) {
    throw ConfigError("training.dataset = \"synthetic\" needs model.vocab_size >= 2");
  }
}

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

// ---- parsing ----

TrainConfig parse_train_config(std::string_view toml_text, std::string_view source) {
  toml::table root;
  try {
    root = tu::parse(toml_text, source);
  } catch (const sharding::PlanError& e) {
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
  } catch (const sharding::PlanError& e) {
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
      << "  --section.key VALUE    override one key after the file; a bare --key sets a bool key to true\n\n"
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
