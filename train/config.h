// The fsdp-train job configuration: a TorchTitan-style TOML file, then `--section.key value` command-line
// overrides, then validate(world_size). Section and key names are TorchTitan's wherever the meaning is
// the same; every key, its type, default and origin is declared once in config.cc and listed by
// train_config_usage() and docs/training.md.
//
//   TrainConfig cfg = load_train_config(parse_command_line(argc, argv));  // defaults <- file <- flags
//   cfg.validate(world_size);   // resolves -1 degrees and the global batch, checks cross-key rules
//   spec::ModelSpec model = cfg.model_spec();
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/host_memory.h"
#include "runtime/lr_schedule.h"
#include "sharding/chip_profile.h"
#include "spec/fault_tolerance.h"
#include "spec/job_spec.h"
#include "spec/mesh.h"
#include "spec/model_spec.h"
#include "spec/policy.h"

namespace fsdp::train {

// Bad configuration: the message names the key (or flag) and, for files, "file:line".
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct JobConfig {
  std::string dump_folder = "./outputs";  // relative checkpoint/metrics/trace paths are under it
  std::string description = "default job";
  bool print_config = false;  // rank 0 prints the resolved configuration at start-up, then trains
};

// The Llama 3 flavor plus optional explicit dimensions that override it (unset: the flavor's value).
struct ModelConfig {
  std::string name = "llama3";
  // TorchTitan's "debugmodel" (dim 256, 6 layers, vocab 2048) and "8B"/"70B"/"405B", our byte-vocabulary
  // "debugmodel_byte", or a sharding preset name.
  std::string flavor = "debugmodel";
  std::optional<int64_t> dim;
  std::optional<int64_t> n_layers;
  std::optional<int64_t> n_heads;
  std::optional<int64_t> n_kv_heads;
  std::optional<int64_t> vocab_size;
  std::optional<int64_t> multiple_of;
  std::optional<double> ffn_dim_multiplier;
  double norm_eps = 1e-5;
  double rope_theta = 500000;
  // Llama 3.1 RoPE scaling, on as in TorchTitan's llama3 models (model/ops.h RopeScaling).
  bool rope_scaling = true;
  double rope_scaling_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position_embeddings = 8192;
  // "torchtitan": TorchTitan's init (embeddings N(0, 1), output projections N(0, 0.02 / sqrt(2 (layer + 1))),
  // output N(0, dim^-1/2) cut at 3 sd); "normal": N(0, 0.02) for every matrix (model/init.h).
  std::string init_scheme = "torchtitan";
  std::string hf_assets_path;  // folder with tokenizer.json (TorchTitan's); empty: see train/data_setup.h
  std::string tokenizer_path;  // TorchTitan's deprecated name: a folder, tokenizer.json or tiktoken file
};

struct TrainingConfig {
  int64_t local_batch_size = 8;  // sequences per data-parallel rank per micro-step
  int64_t seq_len = 2048;        // tokens per sequence (a window holds seq_len + 1 tokens)
  int64_t steps = 10000;
  double max_norm = 1.0;  // gradient clipping by global L2 norm; 0 disables
  // -1: local_batch_size * dp degree * gradient_accumulation_steps. Resolved by validate().
  int64_t global_batch_size = -1;
  int64_t gradient_accumulation_steps = 1;  // micro-steps per optimizer step; validate() derives it
  DataType mixed_precision_param = DataType::kBfloat16;  // all-gathered parameters and compute: bf16 or f32
  DataType mixed_precision_reduce = DataType::kFloat32;  // gradients' reduce-scatter: f32 or bf16
  spec::CommPrecision param_comm_dtype =
      spec::CommPrecision::kDefault;  // mxfp8: all-gathers as MXFP8, decoded on arrival
  spec::CommPrecision grad_comm_dtype =
      spec::CommPrecision::kDefault;  // mxfp8: reduce-scatters as MXFP8, summed in f32
  int64_t seed = 0;
  bool deterministic = false;
  std::string dataset = "tiny_corpus";  // "tiny_corpus", "synthetic", or TorchTitan's c4_test / c4 / c4_validation
  std::string dataset_path;             // local files of a text data set (TorchTitan's); empty: its default
  bool skip_nonfinite_steps = false;    // ours: skip the optimizer step on NaN/Inf loss instead of stopping
};

struct OptimizerConfig {
  spec::Optimizer name = spec::Optimizer::kAdamW;  // "AdamW" or "SGD" (with momentum)
  double lr = 8e-4;
  double eps = 1e-8;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double weight_decay = 0.1;
  double momentum = 0.9;  // ours: SGD only
};

struct LrSchedulerConfig {
  int64_t warmup_steps = 200;
  std::optional<int64_t> total_steps;  // steps the schedule spans; unset: training.steps
  std::optional<double> decay_ratio;  // unset: decay over every step after warm-up
  std::string decay_type = "linear";  // "linear", "cosine", "sqrt"
  double min_lr_factor = 0.0;
};

struct ParallelismConfig {
  int64_t data_parallel_replicate_degree = 1;
  int64_t data_parallel_shard_degree = -1;  // -1: world_size / replicate degree (resolved by validate)
  // TorchTitan's "default"/"always"/"never", or (ours) an integer group size: after forward keep
  // parameters gathered within groups of that many shard ranks (FSDP2's int form).
  spec::Reshard fsdp_reshard_after_forward;
  int64_t prefetch = 1;  // ours: units all-gathered ahead of the one computing
  std::string plan_file;  // ours: a plan from `fsdp-plan --out`, checked against the job; empty: none
  // Experts split over groups of this many shard ranks (sharding/expert_parallel.h); 1: none.
  int64_t expert_parallel_degree = 1;

  int64_t dp_degree() const { return data_parallel_replicate_degree * data_parallel_shard_degree; }
};

struct CheckpointConfig {
  bool enable_checkpoint = false;     // also TorchTitan's current name, checkpoint.enable
  std::string folder = "checkpoint";  // under job.dump_folder
  int64_t interval = 500;             // steps between saves
  int64_t keep_latest_k = 10;         // 0 keeps all
  int64_t load_step = -1;             // -1: the latest one found
  std::string async_mode = "disabled";  // "disabled", "async" (or "async_with_pinned_mem", the same here)
  // Weights in and out, TorchTitan's meanings and defaults (docs/checkpoints.md "Weights in and out").
  std::string initial_load_path;       // step dir, checkpoint folder or .safetensors file; used when `folder` has none
  bool initial_load_model_only = true;  // weights only: step 0, fresh optimizer and data position
  bool initial_load_in_hf = false;      // the safetensors file has Hugging Face Llama names
  bool last_save_model_only = true;     // the save after the last step holds the weights only
  DataType export_dtype = DataType::kFloat32;  // of that model-only save: float32, bfloat16 or float16
  bool last_save_in_hf = false;          // that save as step-<N>/model.safetensors with HF names
};

struct MetricsConfig {
  int64_t log_freq = 10;
  bool save_for_all_ranks = false;
  std::string file;        // ours: per-step records, JSONL, or CSV when it ends in ".csv"; empty: none
  std::string trace_file;  // ours: Chrome/Perfetto trace; empty: tracing off
};

struct ActivationCheckpointConfig {
  // "none", "selective" or "full". TorchTitan defaults to selective; we keep none for files that omit the
  // key (docs/config.md says why).
  spec::ActivationCheckpointing mode = spec::ActivationCheckpointing::kNone;
  // selective_ac_option: "op" (0) or a positive layer interval (TorchTitan's default "2").
  int64_t selective_ac_every = 2;
};

// What a job's memory is measured against (the metric line's percentage, the start-up fit): this host's
// memory (or its cgroup's limit, the smaller) on the CPU, the chip profile's on a planned accelerator;
// `source` says which.
MemoryLimit job_memory_capacity(const sharding::ChipProfile& chip);

struct TrainConfig {
  JobConfig job;
  ModelConfig model;
  TrainingConfig training;
  OptimizerConfig optimizer;
  LrSchedulerConfig lr_scheduler;
  ParallelismConfig parallelism;
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
  ActivationCheckpointConfig activation_checkpoint;
  spec::FaultTolerance fault_tolerance;     // [fault_tolerance]: in-job recovery from a lost rank
  std::optional<spec::Mesh> resolved_mesh;  // set by validate()
  // TorchTitan keys with no counterpart here (config_torchtitan_only.cc), "section.key" -> the TOML
  // literal given; unset ones keep TorchTitan's default.
  std::map<std::string, std::string> torchtitan_only;
  // Keys given (file or flags) that have no effect in this runtime, in the order read.
  std::vector<std::string> no_effect_keys;
  // Where each key given was set, "section.key" -> "job.toml:12" (a file's line) or "" (a flag), so that
  // a problem found after reading (a missing path, the memory fit) still names the line.
  std::map<std::string, std::string> key_lines;
  // "job.toml:12: " when `key` was set by a file, else "" (a flag or the default): a problem's prefix.
  std::string where_set(std::string_view key) const;

  // One start-up line naming no_effect_keys grouped by why they have no effect; "" when none.
  std::string no_effect_line() const;

  // Resolves data_parallel_shard_degree -1, global_batch_size -1 and gradient_accumulation_steps, and
  // checks the rules that span keys: replicate * shard == world_size, the global batch divisible by
  // local_batch_size * dp degree, a reshard group size dividing the shard degree, heads dividing dim,
  // the byte corpus fitting the vocabulary, checkpoint settings. Throws ConfigError naming the keys.
  // Reads no file but the tokenizer, and only when it is there (its vocabulary is a floor under the
  // model's): what --print-config needs.
  void resolve_keys(int64_t world_size);
  // resolve_keys(), then everything the keys point at (train/config_paths.h: the data set, tokenizer and
  // assets, the checkpoint folders, metrics.file and metrics.trace_file, the plan file) and the memory
  // fit (check_fits_machine_memory), in one pass: every mistake in one ConfigError, each naming its key
  // and, when a file set it, the file's line. Before anything starts.
  void validate(int64_t world_size);
  // The data-parallel mesh validate() resolved (replicate x shard over its world size): the one the
  // process groups, the data loader and the plan check use. Throws ConfigError before validate().
  const spec::Mesh& mesh() const;
  // After resolve_keys(): refuses sizes whose memory would exceed this machine: the planner's estimate
  // of one rank's peak (sharding/planner.h, the one memory model) against job_memory_capacity, naming
  // the keys of the largest share of it (the blocks', the vocabulary's or the tokens') and the bytes,
  // before anything is allocated; sizes past int64 (spec::SizeOverflow) name the keys of the size that
  // overflowed. A model or policy the spec refuses is left to the key checks. Part of validate(), not of
  // resolve_keys(), so --print-config still shows any flavor.
  void check_fits_machine_memory() const;
  // The planner's name of the model: the flavor's preset, or "llama3-<flavor>".
  std::string model_name() const;

  // The flavor's Llama 3 dimensions with the explicit [model] keys applied (norm, RoPE and its scaling
  // included): the model the job trains.
  spec::ModelDims model_dims() const;
  spec::ModelSpec model_spec() const;  // spec::make_llama(model_dims())
  // The training policy the keys describe: dtypes, communication precision, optimizer, reshard,
  // prefetch, activation checkpointing and the batch shape.
  spec::Policy policy() const;
  // After validate(): the job the file describes, as every layer below takes it (spec/job_spec.h).
  spec::JobSpec job_spec() const;
  // optimizer.lr with the [lr_scheduler] keys; decay_ratio keeps TorchTitan's meaning (a fraction of
  // all training steps, cut to what warm-up leaves).
  runtime::LrSchedule lr_schedule() const;

  // Path under job.dump_folder unless absolute; empty stays empty.
  std::string resolve_path(const std::string& path) const;
  std::string checkpoint_dir() const { return resolve_path(checkpoint.folder); }
  std::string metrics_path() const { return resolve_path(metrics.file); }
  std::string trace_path() const { return resolve_path(metrics.trace_file); }

  // Tokens one data-parallel rank consumes per optimizer step.
  int64_t tokens_per_step_per_rank() const {
    return training.local_batch_size * training.seq_len * training.gradient_accumulation_steps;
  }

  // Every key as a TOML document (the resolved configuration to print at start-up); parses back to
  // an equal configuration.
  std::string to_toml() const;
};

// Parses a TOML document over the defaults. `source` names it in errors ("debug_model.toml:12: ..."):
// every mistake of the document in one ConfigError, one per line, in file order.
TrainConfig parse_train_config(std::string_view toml_text, std::string_view source);
TrainConfig load_train_config_file(const std::string& path);

// Applies one `--section.key value` override (flag without the leading "--" or with it). The value is
// type-checked as the file's would be; errors name the flag.
void apply_override(TrainConfig& config, std::string_view flag, std::string_view value);

struct CommandLine {
  std::optional<std::string> config_file;                      // --config FILE (or --job.config_file)
  std::vector<std::pair<std::string, std::string>> overrides;  // ("training.steps", "20"), in order
  bool help = false;                                           // --help / -h
  bool print_config = false;  // --print-config: the resolved keys and environment knobs, then exit
};
// Accepts `--key value`, `--key=value`, a bare `--key` for a boolean key (true) and `--section.no_key`
// (false). Unknown keys and missing values throw one ConfigError naming every bad flag. argv[0] is the
// program name.
CommandLine parse_command_line(int argc, const char* const* argv);
// Defaults, then the file (if any), then the overrides in order; the file's and the flags' mistakes
// together in one ConfigError.
TrainConfig load_train_config(const CommandLine& command_line);

// Usage text: the flags, then every key by section with its type, default and meaning.
std::string train_config_usage(std::string_view program);

// One row per key, for the help text and the reference table.
struct ConfigKeyInfo {
  std::string section;
  std::string key;
  std::string type;           // "int", "float", "bool", "string", or the choices "a|b|c"
  std::string default_value;  // TOML literal; empty for an unset optional
  std::string help;
  bool torchtitan = false;  // same name and meaning as TorchTitan's JobConfig
};
std::vector<ConfigKeyInfo> train_config_keys();

}  // namespace fsdp::train
