#include "train/config_fields.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/json.h"
#include "spec/model_spec.h"

namespace fsdp::train {
namespace config_table {
namespace {

std::string float_literal(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = json::number(v);                            // reads back exactly
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // TOML needs a float to look like one
  return s;
}

// TOML basic strings take JSON's escapes.
std::string string_literal(std::string_view v) { return json::quote(v); }

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
  return Field{std::move(section),
               std::move(key),
               Kind::kInt,
               {},
               tt,
               std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<int64_t>(v); },
               [acc](const TrainConfig& c) { return std::to_string(access(acc, c)); },
               std::move(check)};
}

Field opt_int_field(std::string section, std::string key, Accessor<std::optional<int64_t>> acc, bool tt,
                    std::string help, Check check = {}) {
  return Field{std::move(section),
               std::move(key),
               Kind::kInt,
               {},
               tt,
               std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<int64_t>(v); },
               [acc](const TrainConfig& c) {
                 const auto& v = access(acc, c);
                 return v ? std::to_string(*v) : std::string();
               },
               std::move(check)};
}

Field float_field(std::string section, std::string key, Accessor<double> acc, bool tt, std::string help,
                  Check check = {}) {
  return Field{std::move(section),
               std::move(key),
               Kind::kFloat,
               {},
               tt,
               std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<double>(v); },
               [acc](const TrainConfig& c) { return float_literal(access(acc, c)); },
               std::move(check)};
}

Field opt_float_field(std::string section, std::string key, Accessor<std::optional<double>> acc, bool tt,
                      std::string help, Check check = {}) {
  return Field{std::move(section),
               std::move(key),
               Kind::kFloat,
               {},
               tt,
               std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<double>(v); },
               [acc](const TrainConfig& c) {
                 const auto& v = access(acc, c);
                 return v ? float_literal(*v) : std::string();
               },
               std::move(check)};
}

Field bool_field(std::string section, std::string key, Accessor<bool> acc, bool tt, std::string help) {
  return Field{std::move(section),
               std::move(key),
               Kind::kBool,
               {},
               tt,
               std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<bool>(v); },
               [acc](const TrainConfig& c) { return std::string(access(acc, c) ? "true" : "false"); },
               {}};
}

Field string_field(std::string section, std::string key, Accessor<std::string> acc, bool tt, std::string help,
                   Check check = {}) {
  return Field{std::move(section),
               std::move(key),
               Kind::kString,
               {},
               tt,
               std::move(help),
               [acc](TrainConfig& c, const Value& v) { acc(c) = std::get<std::string>(v); },
               [acc](const TrainConfig& c) { return string_literal(access(acc, c)); },
               std::move(check)};
}

Field choice_field(std::string section, std::string key, Accessor<std::string> acc, std::vector<std::string> choices,
                   bool tt, std::string help) {
  Field f = string_field(std::move(section), std::move(key), acc, tt, std::move(help));
  f.kind = Kind::kChoice;
  f.choices = std::move(choices);
  return f;
}

// A key whose TOML spelling names an enum value (a dtype, the optimizer, a mode): parsed into the typed
// field once, here; nothing after the reader compares its string. kChoice lists `names` in errors; a
// `check` of its own (kString) gives a key its own refusal texts.
template <class E>
Field enum_field(std::string section, std::string key, Accessor<E> acc, std::vector<std::pair<std::string, E>> names,
                 bool tt, std::string help, Check check = {}) {
  std::vector<std::string> choices;
  for (const auto& n : names) choices.push_back(n.first);
  return Field{std::move(section),
               std::move(key),
               check ? Kind::kString : Kind::kChoice,
               check ? std::vector<std::string>{} : std::move(choices),
               tt,
               std::move(help),
               [acc, names](TrainConfig& c, const Value& v) {
                 for (const auto& [spelling, value] : names) {
                   if (spelling == std::get<std::string>(v)) acc(c) = value;  // a checked choice
                 }
               },
               [acc, names](const TrainConfig& c) {
                 for (const auto& [spelling, value] : names) {
                   if (value == access(acc, c)) return string_literal(spelling);
                 }
                 return std::string();
               },
               std::move(check)};
}

const std::vector<std::pair<std::string, DataType>> kParamDtypes = {{"bfloat16", DataType::kBfloat16},
                                                                    {"float32", DataType::kFloat32}};
const std::vector<std::pair<std::string, DataType>> kReduceDtypes = {{"float32", DataType::kFloat32},
                                                                     {"bfloat16", DataType::kBfloat16}};
const std::vector<std::pair<std::string, spec::CommPrecision>> kCommPrecisions = {
    {"default", spec::CommPrecision::kDefault}, {"mxfp8", spec::CommPrecision::kMxfp8}};

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
std::string minus_one_or_non_negative(const Value& v) { return std::get<int64_t>(v) >= -1 ? "" : "must be -1 or >= 0"; }
std::string global_batch(const Value& v) {
  const int64_t i = std::get<int64_t>(v);
  return i == -1 || i >= 1 ? "" : "must be -1 (local_batch_size x dp degree) or >= 1";
}
std::string activation_mode(const Value& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "none" || s == "selective" || s == "full") return "";
  if (s == "memory_budget") {
    return "'memory_budget' needs torch.compile's min-cut partitioner, which this runtime does not have; use "
           "\"selective\" or \"full\"";
  }
  return "'" + s + "' is not a mode (none, selective or full; TorchTitan also has memory_budget)";
}
// TorchTitan's selective_ac_option: "op" or a positive layer interval.
std::string selective_ac_option(const Value& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "op") return "";
  const bool digits =
      !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits && std::stoll(s) > 0) return "";
  return "'" + s +
         "' is neither \"op\" nor a positive layer interval such as \"2\" (for every block use "
         "mode = \"full\")";
}

std::vector<std::string> flavor_choices() {
  std::vector<std::string> c;
  for (const auto& [alias, preset] : flavor_aliases()) c.push_back(alias);
  for (const auto& p : spec::model_preset_names()) c.push_back(p);
  return c;
}

}  // namespace

std::string literal(Kind kind, const Value& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) return float_literal(*d);
  const auto& text = std::get<std::string>(v);
  return kind == Kind::kList ? text : string_literal(text);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : std::string(sep)) + i;
  return s;
}

// TorchTitan's llama3 flavor names mapped to the planner's presets.
const std::vector<std::pair<std::string, std::string>>& flavor_aliases() {
  static const std::vector<std::pair<std::string, std::string>> kAliases = {
      {"debugmodel", "llama3-debug"}, {"8B", "llama3-8b"}, {"70B", "llama3-70b"}, {"405B", "llama3-405b"}};
  return kAliases;
}

#define FSDP_ACC(type, member) [](TrainConfig& c) -> type& { return c.member; }

// long-code: declarative table
const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = [] {
    std::vector<Field> f;
    // [job]
    f.push_back(string_field("job", "dump_folder", FSDP_ACC(std::string, job.dump_folder), true,
                             "folder for checkpoints, metrics and traces (relative paths are under it)"));
    f.push_back(string_field("job", "description", FSDP_ACC(std::string, job.description), true,
                             "free text printed at start-up"));
    f.push_back(bool_field("job", "print_config", FSDP_ACC(bool, job.print_config), true,
                           "rank 0 prints the resolved configuration at start-up, then trains (--print-config "
                           "prints it and exits)"));
    // [model]
    f.push_back(
        choice_field("model", "name", FSDP_ACC(std::string, model.name), {"llama3"}, true, "model architecture"));
    f.push_back(choice_field("model", "flavor", FSDP_ACC(std::string, model.flavor), flavor_choices(), true,
                             "size preset: TorchTitan's debugmodel (dim 256, 6 layers, vocab 2048) and "
                             "8B/70B/405B, debugmodel_byte (ours: byte vocab, trains on 2 CPU cores), or a planner "
                             "preset"));
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
    f.push_back(float_field("model", "norm_eps", FSDP_ACC(double, model.norm_eps), false, "RMSNorm epsilon", positive));
    f.push_back(float_field("model", "rope_theta", FSDP_ACC(double, model.rope_theta), false, "rotary embedding base",
                            positive));
    f.push_back(bool_field("model", "rope_scaling", FSDP_ACC(bool, model.rope_scaling), false,
                           "Llama 3.1 RoPE frequency scaling, on as in TorchTitan's llama3 models"));
    f.push_back(float_field("model", "rope_scaling_factor", FSDP_ACC(double, model.rope_scaling_factor), false,
                            "low-frequency RoPE pairs turn this many times slower", positive));
    f.push_back(float_field("model", "rope_low_freq_factor", FSDP_ACC(double, model.rope_low_freq_factor), false,
                            "pairs with wavelength above original context / this are scaled fully", positive));
    f.push_back(float_field("model", "rope_high_freq_factor", FSDP_ACC(double, model.rope_high_freq_factor), false,
                            "pairs with wavelength below original context / this keep their frequency (must exceed "
                            "rope_low_freq_factor)",
                            positive));
    f.push_back(int_field("model", "rope_original_max_position_embeddings",
                          FSDP_ACC(int64_t, model.rope_original_max_position_embeddings), false,
                          "context length the RoPE scaling is relative to", positive));
    f.push_back(choice_field("model", "init_scheme", FSDP_ACC(std::string, model.init_scheme), {"torchtitan", "normal"},
                             false,
                             "parameter init: torchtitan (embeddings N(0,1); wo, w2, w3 of layer l "
                             "N(0, 0.02/sqrt(2(l+1))); output N(0, dim^-1/2) cut at 3 sd; the rest N(0, 0.02)) or "
                             "normal (N(0, 0.02) every matrix); norms 1"));
    f.push_back(string_field("model", "hf_assets_path", FSDP_ACC(std::string, model.hf_assets_path), true,
                             "folder with tokenizer.json (and tokenizer_config.json for BOS/EOS) or a tiktoken "
                             "original/tokenizer.model; empty = ./tests/assets/tokenizer for the text data sets, "
                             "byte tokens otherwise"));
    f.push_back(string_field("model", "tokenizer_path", FSDP_ACC(std::string, model.tokenizer_path), true,
                             "TorchTitan's older name: a tokenizer folder, tokenizer.json or tiktoken file; wins over "
                             "hf_assets_path"));
    // [training]
    f.push_back(int_field("training", "local_batch_size", FSDP_ACC(int64_t, training.local_batch_size), true,
                          "sequences per data-parallel rank per micro-step", positive));
    f.push_back(
        int_field("training", "seq_len", FSDP_ACC(int64_t, training.seq_len), true, "tokens per sequence", positive));
    f.push_back(
        int_field("training", "steps", FSDP_ACC(int64_t, training.steps), true, "optimizer steps to run", positive));
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
    f.push_back(enum_field<DataType>("training", "mixed_precision_param",
                                     FSDP_ACC(DataType, training.mixed_precision_param), kParamDtypes, true,
                                     "dtype parameters are all-gathered and computed in"));
    f.push_back(enum_field<DataType>("training", "mixed_precision_reduce",
                                     FSDP_ACC(DataType, training.mixed_precision_reduce), kReduceDtypes, true,
                                     "dtype gradients are reduce-scattered in"));
    f.push_back(enum_field<spec::CommPrecision>(
        "training", "param_comm_dtype", FSDP_ACC(spec::CommPrecision, training.param_comm_dtype), kCommPrecisions,
        false,
        "what parameter all-gathers carry: default (mixed_precision_param) or mxfp8 (8.25 bits "
        "per element, the shard owner quantises once per step, decoded on arrival)"));
    f.push_back(enum_field<spec::CommPrecision>(
        "training", "grad_comm_dtype", FSDP_ACC(spec::CommPrecision, training.grad_comm_dtype), kCommPrecisions, false,
        "what gradient reduce-scatters carry: default (mixed_precision_reduce) or mxfp8 "
        "(quantised per destination, exchanged all-to-all, summed in f32)"));
    f.push_back(int_field("training", "seed", FSDP_ACC(int64_t, training.seed), true,
                          "seed of initialisation and data order (TorchTitan: unset = random; here 0)", non_negative));
    f.push_back(bool_field("training", "deterministic", FSDP_ACC(bool, training.deterministic), true,
                           "bitwise-reproducible kernels and reduction order"));
    f.push_back(choice_field("training", "dataset", FSDP_ACC(std::string, training.dataset),
                             {"tiny_corpus", "synthetic", "c4_test", "c4", "c4_validation"}, true,
                             "tiny_corpus (bundled English text, byte tokens unless a tokenizer is set), synthetic "
                             "(seeded Markov chain), or TorchTitan's text data sets read from local files: c4_test "
                             "(tests/assets/c4_test), c4 / c4_validation (allenai/c4, its en/ files)"));
    f.push_back(string_field("training", "dataset_path", FSDP_ACC(std::string, training.dataset_path), true,
                             "local file or folder of the text data set (JSON lines with \"text\", .txt one "
                             "document per line); empty = the data set's own path, relative to the working "
                             "directory; nothing is downloaded"));
    f.push_back(bool_field("training", "skip_nonfinite_steps", FSDP_ACC(bool, training.skip_nonfinite_steps), false,
                           "skip the optimizer step on a NaN/Inf loss or grad norm instead of stopping"));
    // [debug]: TorchTitan's newer home of training.seed and training.deterministic (the same settings)
    f.push_back(
        int_field("debug", "seed", FSDP_ACC(int64_t, training.seed), true, "the same as training.seed", non_negative));
    f.push_back(bool_field("debug", "deterministic", FSDP_ACC(bool, training.deterministic), true,
                           "the same as training.deterministic"));
    // [optimizer]
    f.push_back(enum_field<spec::Optimizer>(
        "optimizer", "name", FSDP_ACC(spec::Optimizer, optimizer.name),
        {{"AdamW", spec::Optimizer::kAdamW}, {"SGD", spec::Optimizer::kSgdMomentum}}, true, "optimizer"));
    f.push_back(
        float_field("optimizer", "lr", FSDP_ACC(double, optimizer.lr), true, "peak learning rate", non_negative));
    f.push_back(float_field("optimizer", "eps", FSDP_ACC(double, optimizer.eps), true, "AdamW epsilon", positive));
    f.push_back(float_field("optimizer", "beta1", FSDP_ACC(double, optimizer.beta1), true, "AdamW beta1", beta));
    f.push_back(float_field("optimizer", "beta2", FSDP_ACC(double, optimizer.beta2), true, "AdamW beta2", beta));
    f.push_back(float_field("optimizer", "weight_decay", FSDP_ACC(double, optimizer.weight_decay), true,
                            "decoupled weight decay (AdamW) or L2 (SGD)", non_negative));
    f.push_back(
        float_field("optimizer", "momentum", FSDP_ACC(double, optimizer.momentum), false, "SGD momentum", beta));
    // [lr_scheduler]
    f.push_back(int_field("lr_scheduler", "warmup_steps", FSDP_ACC(int64_t, lr_scheduler.warmup_steps), true,
                          "linear warm-up steps", non_negative));
    f.push_back(opt_int_field("lr_scheduler", "total_steps", FSDP_ACC(std::optional<int64_t>, lr_scheduler.total_steps),
                              true, "steps the schedule spans; unset = training.steps", positive));
    f.push_back(
        opt_float_field("lr_scheduler", "decay_ratio", FSDP_ACC(std::optional<double>, lr_scheduler.decay_ratio), true,
                        "fraction of steps spent decaying at the end; unset = all after warm-up", unit_interval));
    f.push_back(choice_field("lr_scheduler", "decay_type", FSDP_ACC(std::string, lr_scheduler.decay_type),
                             {"linear", "cosine", "sqrt"}, true, "decay shape"));
    f.push_back(float_field("lr_scheduler", "min_lr_factor", FSDP_ACC(double, lr_scheduler.min_lr_factor), true,
                            "decay floor as a fraction of lr", unit_interval));
    // [parallelism]
    f.push_back(int_field(
        "parallelism", "data_parallel_replicate_degree", FSDP_ACC(int64_t, parallelism.data_parallel_replicate_degree),
        true, "HSDP replica groups (parameters replicated across them); -1 = the rest of the world", degree));
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
                const auto* i = std::get_if<int64_t>(&v);
                c.parallelism.fsdp_reshard_after_forward =
                    i ? spec::Reshard{spec::Reshard::Mode::kGroup, *i}
                      : spec::Reshard::parse(std::get<std::string>(v));  // a checked choice
              },
              [](const TrainConfig& c) {
                const auto& m = c.parallelism.fsdp_reshard_after_forward;
                return m.mode == spec::Reshard::Mode::kGroup ? m.to_string() : string_literal(m.to_string());
              },
              [](const Value& v) {
                const auto* i = std::get_if<int64_t>(&v);
                return i == nullptr || *i >= 1 ? std::string() : std::string("a group size must be >= 1");
              }};
      f.push_back(std::move(r));
    }
    f.push_back(int_field("parallelism", "expert_parallel_degree",
                          FSDP_ACC(int64_t, parallelism.expert_parallel_degree), true,
                          "MoE experts split over groups of this many shard ranks (all_to_all_v token dispatch); "
                          "must divide data_parallel_shard_degree and the number of experts; 1 = none",
                          positive));
    f.push_back(int_field("parallelism", "prefetch", FSDP_ACC(int64_t, parallelism.prefetch), false,
                          "units all-gathered ahead of the one computing", non_negative));
    f.push_back(string_field("parallelism", "plan_file", FSDP_ACC(std::string, parallelism.plan_file), false,
                             "a plan from `fsdp-plan --out FILE` (.txtpb: text); the job refuses it, naming each "
                             "difference, unless it matches this model, mesh and policy; empty = plan here"));
    // [checkpoint]
    f.push_back(bool_field("checkpoint", "enable", FSDP_ACC(bool, checkpoint.enable_checkpoint), true,
                           "save and resume checkpoints"));
    f.push_back(bool_field("checkpoint", "enable_checkpoint", FSDP_ACC(bool, checkpoint.enable_checkpoint), true,
                           "the same as checkpoint.enable (TorchTitan's earlier name)"));
    f.push_back(string_field("checkpoint", "folder", FSDP_ACC(std::string, checkpoint.folder), true,
                             "checkpoint folder under job.dump_folder"));
    f.push_back(int_field("checkpoint", "interval", FSDP_ACC(int64_t, checkpoint.interval), true,
                          "steps between checkpoints", positive));
    f.push_back(int_field("checkpoint", "keep_latest_k", FSDP_ACC(int64_t, checkpoint.keep_latest_k), true,
                          "checkpoints kept; 0 keeps all", non_negative));
    f.push_back(int_field("checkpoint", "load_step", FSDP_ACC(int64_t, checkpoint.load_step), true,
                          "step to resume from; -1 = the latest found", minus_one_or_non_negative));
    f.push_back(choice_field("checkpoint", "async_mode", FSDP_ACC(std::string, checkpoint.async_mode),
                             {"disabled", "async", "async_with_pinned_mem"}, true,
                             "write checkpoints on a background thread (async_with_pinned_mem: the same, host "
                             "memory needs no pinning)"));
    // Weights in and out (docs/checkpoints.md).
    f.push_back(string_field("checkpoint", "initial_load_path", FSDP_ACC(std::string, checkpoint.initial_load_path),
                             true,
                             "used when `folder` has no checkpoint: a step directory, a checkpoint folder "
                             "(load_step picks the step) or a .safetensors file; resharded to this run's layout"));
    f.push_back(bool_field("checkpoint", "initial_load_model_only", FSDP_ACC(bool, checkpoint.initial_load_model_only),
                           true,
                           "initial_load_path gives the weights only: training starts at step 0 with a fresh "
                           "optimizer and data position; false resumes its whole training state"));
    f.push_back(bool_field("checkpoint", "initial_load_in_hf", FSDP_ACC(bool, checkpoint.initial_load_in_hf), true,
                           "initial_load_path is safetensors with Hugging Face Llama names and q/k row order (a "
                           ".safetensors file, or a folder holding one)"));
    f.push_back(bool_field("checkpoint", "last_save_model_only", FSDP_ACC(bool, checkpoint.last_save_model_only), true,
                           "the save after the last step holds the weights only (not resumable)"));
    f.push_back(enum_field<DataType>(
        "checkpoint", "export_dtype", FSDP_ACC(DataType, checkpoint.export_dtype),
        {{"float32", DataType::kFloat32}, {"bfloat16", DataType::kBfloat16}, {"float16", DataType::kFloat16}}, true,
        "dtype of the model-only last save; other than float32 it is step-<N>/model.safetensors"));
    f.push_back(bool_field("checkpoint", "last_save_in_hf", FSDP_ACC(bool, checkpoint.last_save_in_hf), true,
                           "the model-only last save is step-<N>/model.safetensors with Hugging Face Llama names "
                           "(needs last_save_model_only)"));
    // [metrics]
    f.push_back(int_field("metrics", "log_freq", FSDP_ACC(int64_t, metrics.log_freq), true,
                          "print a metrics line every this many steps (and at step 1)", positive));
    f.push_back(bool_field("metrics", "save_for_all_ranks", FSDP_ACC(bool, metrics.save_for_all_ranks), true,
                           "every rank writes its own metrics file (FILE.rank<r>.EXT), not only rank 0"));
    f.push_back(string_field("metrics", "file", FSDP_ACC(std::string, metrics.file), false,
                             "per-step records: JSONL, or CSV when the name ends in .csv; empty = none"));
    f.push_back(string_field("metrics", "trace_file", FSDP_ACC(std::string, metrics.trace_file), false,
                             "Chrome/Perfetto trace of every rank, merged into one file by rank 0 (--trace FILE is "
                             "short for it); empty = off"));
    // [activation_checkpoint]
    f.push_back(enum_field<spec::ActivationCheckpointing>(
        "activation_checkpoint", "mode", FSDP_ACC(spec::ActivationCheckpointing, activation_checkpoint.mode),
        {{"none", spec::ActivationCheckpointing::kNone},
         {"selective", spec::ActivationCheckpointing::kSelective},
         {"full", spec::ActivationCheckpointing::kFull}},
        true,
        "recompute activations in backward: none, selective or full (docs/config.md; "
        "TorchTitan's default is selective, ours none)",
        activation_mode));
    // TorchTitan's string, kept as the layer interval it names (0: "op").
    f.push_back(Field{"activation_checkpoint",
                      "selective_ac_option",
                      Kind::kString,
                      {},
                      true,
                      "with mode selective: \"op\" (TorchTitan's op policy: keep matmul and attention outputs except "
                      "every second matmul's, recompute the rest) or K (every K-th block fully checkpointed, "
                      "TorchTitan's count from 1)",
                      [](TrainConfig& c, const Value& v) {
                        const auto& s = std::get<std::string>(v);
                        c.activation_checkpoint.selective_ac_every = s == "op" ? 0 : std::stoll(s);  // checked
                      },
                      [](const TrainConfig& c) {
                        const int64_t every = c.activation_checkpoint.selective_ac_every;
                        return string_literal(every == 0 ? std::string("op") : std::to_string(every));
                      },
                      selective_ac_option});
    // [fault_tolerance] (docs/fault_tolerance.md): TorchTitan's enable; the rest is ours.
    f.push_back(bool_field("fault_tolerance", "enable", FSDP_ACC(bool, fault_tolerance.enable), true,
                           "a lost rank does not end the job: the survivors shrink, re-plan and redo the step "
                           "(FSDP or HSDP under fsdp-run; docs/fault_tolerance.md)"));
    f.push_back(enum_field<spec::Redundancy>(
        "fault_tolerance", "redundancy", FSDP_ACC(spec::Redundancy, fault_tolerance.redundancy),
        {{"buddy", spec::Redundancy::kBuddy}, {"none", spec::Redundancy::kNone}}, false,
        "with enable: buddy keeps a mirror of the next rank's shard and optimizer state (one gradient shard "
        "sent per step); none keeps nothing, so a lost rank means a restart from the checkpoint. On HSDP the "
        "replicas are the redundancy; this is what the job keeps once a loss leaves it plain FSDP"));
    f.push_back(int_field("fault_tolerance", "min_world_size", FSDP_ACC(int64_t, fault_tolerance.min_world_size), false,
                          "with enable: fewer survivors than this end the job (or restart it)", positive));
    f.push_back(Field{"fault_tolerance",
                      "recovery_timeout_ms",
                      Kind::kInt,
                      {},
                      false,
                      "with enable: how long survivors wait for every rank to report before deciding without "
                      "the silent ones",
                      [](TrainConfig& c, const Value& v) {
                        c.fault_tolerance.recovery_timeout = std::chrono::milliseconds(std::get<int64_t>(v));
                      },
                      [](const TrainConfig& c) { return std::to_string(c.fault_tolerance.recovery_timeout.count()); },
                      positive});
    add_torchtitan_only_fields(f);
    // Grouped by section in the order sections first appear, so to_toml() opens each table once.
    std::vector<std::string> order;
    for (const auto& field : f) {
      if (std::find(order.begin(), order.end(), field.section) == order.end()) order.push_back(field.section);
    }
    std::stable_sort(f.begin(), f.end(), [&](const Field& a, const Field& b) {
      return std::find(order.begin(), order.end(), a.section) < std::find(order.begin(), order.end(), b.section);
    });
    return f;
  }();
  return kFields;
}

#undef FSDP_ACC

}  // namespace config_table
}  // namespace fsdp::train
