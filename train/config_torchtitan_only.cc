// TorchTitan's JobConfig keys (releases v0.2.0 to v0.2.2, torchtitan/config/job_config.py) that have
// no counterpart in this runtime, so that TorchTitan's own TOML files run unchanged: each is accepted
// and type-checked like any key, kept as its TOML literal, and named on one start-up line with the
// reason it has no effect. The tensor/pipeline/context/expert parallel degrees are the exception: 1
// is what this runtime does, anything else is refused.
#include <algorithm>

#include "train/config.h"
#include "train/config_fields.h"

namespace fsdp::train {
namespace config_table {
namespace {

// Why a group of keys has no effect here (one reason per group on the start-up line).
constexpr const char* kNoCompiler = "no graph compiler: the kernels are hand-written C++";
constexpr const char* kNoProfiler = "no PyTorch profiler: metrics.trace_file records a timeline of every rank";
constexpr const char* kNoTracker = "no TensorBoard or W&B: metrics.file writes JSONL or CSV records";
constexpr const char* kNoColor = "the console lines are never coloured";
constexpr const char* kNoConverters =
    "no float8/MX model converters (training.param_comm_dtype = \"mxfp8\" quantises the all-gathers)";
constexpr const char* kNoPython = "no Python: nothing to import or garbage-collect";
constexpr const char* kConfigFile = "the job file is named by --config; --print-config prints the resolved one";
constexpr const char* kOneOptimizer = "one C++ optimizer implementation, stepped after backward";
constexpr const char* kInProcessData = "the data is read in the training process, without loader workers";
constexpr const char* kFp32Master =
    "parameters and optimizer state are kept in float32 (training.mixed_precision_param sets the compute dtype) "
    "in host memory";
constexpr const char* kDataParallelOnly = "only data parallelism (FSDP/HSDP) is implemented";
constexpr const char* kCheckpointExtras = "this checkpoint option is not implemented";
constexpr const char* kNoQuantizedWeights =
    "quantized Hugging Face weights are not read (safetensors in F32, BF16 or F16)";
constexpr const char* kNoActivationCheckpoint =
    "activation checkpointing reruns the model's own deterministic forward (no torch.utils.checkpoint, no RNG "
    "state, a fixed op policy: docs/config.md)";
constexpr const char* kNoFaultTolerance =
    "no torchft replica groups: fault_tolerance.enable recovers inside the one job (docs/fault_tolerance.md)";
constexpr const char* kCommKnobs = "communication timeouts are the FSDP_* environment knobs (docs/config.md)";
constexpr const char* kNoMemoryEstimation = "memory is estimated by fsdp-plan and bounded by validate()";
constexpr const char* kNoValidation = "no validation loop";
constexpr const char* kDense = "the model is dense (no mixture of experts)";
constexpr const char* kNoWarnings = "deterministic kernels here are exact and never warn";

// A TorchTitan-only key: `tt_default` is TorchTitan's default as a TOML literal ("" for None).
Field accepted(std::string section, std::string key, Kind kind, std::string tt_default, const char* no_effect,
               std::vector<std::string> choices = {}) {
  std::string name = section + "." + key;
  Field f{std::move(section),
          std::move(key),
          kind,
          std::move(choices),
          true,
          std::string(no_effect != nullptr ? "no effect here: " + std::string(no_effect) : ""),
          [name, kind](TrainConfig& c, const Value& v) { c.torchtitan_only[name] = literal(kind, v); },
          [name, tt_default](const TrainConfig& c) {
            const auto it = c.torchtitan_only.find(name);
            return it == c.torchtitan_only.end() ? tt_default : it->second;
          },
          {}};
  f.no_effect = no_effect != nullptr ? no_effect : "";
  return f;
}

// A parallel degree this runtime has only at 1.
Field degree_one(std::string key, std::string what) {
  Field f = accepted("parallelism", std::move(key), Kind::kInt, "1", nullptr);
  f.help = what + " degree: only 1 (no " + what + " parallelism here; data parallelism takes every rank)";
  f.check = [what](const Value& v) {
    const int64_t d = std::get<int64_t>(v);
    if (d == 1) return std::string();
    return "is " + std::to_string(d) + ", but " + what +
           " parallelism is not implemented here (only data parallelism: FSDP over "
           "parallelism.data_parallel_shard_degree ranks, replicated over data_parallel_replicate_degree): use 1";
  };
  return f;
}

}  // namespace

// long-code: declarative table
void add_torchtitan_only_fields(std::vector<Field>& f) {
  using K = Kind;
  // [job]
  f.push_back(accepted("job", "config_file", K::kString, "", kConfigFile));
  f.push_back(accepted("job", "save_config_file", K::kString, "", kConfigFile));
  f.push_back(accepted("job", "custom_config_module", K::kString, "\"\"", kNoPython));
  // [profiling]
  f.push_back(accepted("profiling", "enable_profiling", K::kBool, "false", kNoProfiler));
  f.push_back(accepted("profiling", "save_traces_folder", K::kString, "\"profile_traces\"", kNoProfiler));
  f.push_back(accepted("profiling", "profile_freq", K::kInt, "10", kNoProfiler));
  f.push_back(accepted("profiling", "profiler_active", K::kInt, "1", kNoProfiler));
  f.push_back(accepted("profiling", "profiler_warmup", K::kInt, "3", kNoProfiler));
  f.push_back(accepted("profiling", "enable_memory_snapshot", K::kBool, "false", kNoProfiler));
  f.push_back(accepted("profiling", "save_memory_snapshot_folder", K::kString, "\"memory_snapshot\"", kNoProfiler));
  // [metrics]
  f.push_back(accepted("metrics", "enable_tensorboard", K::kBool, "false", kNoTracker));
  f.push_back(accepted("metrics", "disable_color_printing", K::kBool, "false", kNoColor));
  f.push_back(accepted("metrics", "save_tb_folder", K::kString, "\"tb\"", kNoTracker));
  f.push_back(accepted("metrics", "enable_wandb", K::kBool, "false", kNoTracker));
  // [model]
  f.push_back(accepted("model", "converters", K::kList, "[]", kNoConverters));
  f.push_back(accepted("model", "print_after_conversion", K::kBool, "false", kNoConverters));
  // [optimizer]
  f.push_back(accepted("optimizer", "implementation", K::kChoice, "\"fused\"", kOneOptimizer,
                       {"for-loop", "foreach", "fused"}));
  f.push_back(accepted("optimizer", "early_step_in_backward", K::kBool, "false", kOneOptimizer));
  // [training] (v0.2.0 kept seed and deterministic here, as we do; [debug] has them since v0.2.2)
  f.push_back(accepted("training", "enable_cpu_offload", K::kBool, "false", kFp32Master));
  f.push_back(accepted("training", "dtype", K::kChoice, "\"float32\"", kFp32Master, {"bfloat16", "float32"}));
  f.push_back(accepted("training", "gc_freq", K::kInt, "50", kNoPython));
  f.push_back(accepted("training", "gc_debug", K::kBool, "false", kNoPython));
  f.push_back(accepted("training", "debug_moe_force_load_balance", K::kBool, "false", kDense));
  for (const std::string section : {"training.dataloader", "validation.dataloader"}) {
    f.push_back(accepted(section, "num_workers", K::kInt, "0", kInProcessData));
    f.push_back(accepted(section, "persistent_workers", K::kBool, "false", kInProcessData));
    f.push_back(accepted(section, "pin_memory", K::kBool, "false", kInProcessData));
    f.push_back(accepted(section, "prefetch_factor", K::kInt, "", kInProcessData));
  }
  // [parallelism]
  f.push_back(degree_one("tensor_parallel_degree", "tensor"));
  f.push_back(degree_one("pipeline_parallel_degree", "pipeline"));
  f.push_back(degree_one("context_parallel_degree", "context"));
  f.push_back(degree_one("expert_tensor_parallel_degree", "expert tensor"));
  f.push_back(accepted("parallelism", "disable_loss_parallel", K::kBool, "false", kDataParallelOnly));
  f.push_back(accepted("parallelism", "enable_async_tensor_parallel", K::kBool, "false", kDataParallelOnly));
  f.push_back(accepted("parallelism", "enable_compiled_autograd", K::kBool, "false", kNoCompiler));
  f.push_back(accepted("parallelism", "module_fqns_per_model_part", K::kList, "", kDataParallelOnly));
  f.push_back(accepted("parallelism", "pipeline_parallel_first_stage_less_layers", K::kInt, "1", kDataParallelOnly));
  f.push_back(accepted("parallelism", "pipeline_parallel_last_stage_less_layers", K::kInt, "1", kDataParallelOnly));
  f.push_back(accepted("parallelism", "pipeline_parallel_layers_per_stage", K::kInt, "", kDataParallelOnly));
  f.push_back(accepted("parallelism", "pipeline_parallel_schedule", K::kString, "\"1F1B\"", kDataParallelOnly));
  f.push_back(accepted("parallelism", "pipeline_parallel_schedule_csv", K::kString, "\"\"", kDataParallelOnly));
  f.push_back(accepted("parallelism", "pipeline_parallel_microbatch_size", K::kInt, "1", kDataParallelOnly));
  f.push_back(accepted("parallelism", "pipeline_parallel_expert_parallel_overlap", K::kBool, "true", kDataParallelOnly));
  f.push_back(accepted("parallelism", "context_parallel_load_balancer", K::kString, "\"headtail\"", kDataParallelOnly));
  f.push_back(accepted("parallelism", "context_parallel_rotate_method", K::kChoice, "\"allgather\"", kDataParallelOnly,
                       {"allgather", "alltoall"}));
  f.push_back(accepted("parallelism", "expert_parallel_comm_backend", K::kChoice, "\"standard\"", kDataParallelOnly,
                       {"standard", "deepep"}));
  // [checkpoint]
  f.push_back(accepted("checkpoint", "enable_ft_dataloader_checkpoints", K::kBool, "true", kNoFaultTolerance));
  f.push_back(accepted("checkpoint", "exclude_from_loading", K::kList, "[]", kCheckpointExtras));
  f.push_back(accepted("checkpoint", "enable_first_step_checkpoint", K::kBool, "false", kCheckpointExtras));
  f.push_back(accepted("checkpoint", "create_seed_checkpoint", K::kBool, "false", kCheckpointExtras));
  f.push_back(accepted("checkpoint", "load_only", K::kBool, "false", kCheckpointExtras));
  f.push_back(accepted("checkpoint", "initial_load_in_hf_quantized", K::kBool, "false", kNoQuantizedWeights));
  // [activation_checkpoint]
  f.push_back(accepted("activation_checkpoint", "per_op_sac_force_recompute_mm_shapes_by_fqns", K::kList,
                       "[ 'moe.router.gate' ]", kNoActivationCheckpoint));
  f.push_back(accepted("activation_checkpoint", "early_stop", K::kBool, "false", kNoActivationCheckpoint));
  f.push_back(accepted("activation_checkpoint", "memory_budget", K::kFloat, "0.5", kNoActivationCheckpoint));
  f.push_back(
      accepted("activation_checkpoint", "visualize_memory_budget_pareto", K::kBool, "false", kNoActivationCheckpoint));
  f.push_back(accepted("activation_checkpoint", "preserve_rng_state", K::kBool, "true", kNoActivationCheckpoint));
  f.push_back(accepted("activation_checkpoint", "determinism_check", K::kString, "\"default\"", kNoActivationCheckpoint));
  f.push_back(accepted("activation_checkpoint", "debug", K::kBool, "false", kNoActivationCheckpoint));
  // [compile]
  f.push_back(accepted("compile", "enable", K::kBool, "false", kNoCompiler));
  f.push_back(accepted("compile", "components", K::kList, "[ 'model', 'loss' ]", kNoCompiler));
  f.push_back(accepted("compile", "backend", K::kString, "\"inductor\"", kNoCompiler));
  // [quantize.*]
  const std::string f8 = "quantize.linear.float8";
  f.push_back(accepted(f8, "enable_fsdp_float8_all_gather", K::kBool, "false", kNoConverters));
  f.push_back(accepted(f8, "precompute_float8_dynamic_scale_for_fsdp", K::kBool, "false", kNoConverters));
  f.push_back(accepted(f8, "recipe_name", K::kChoice, "", kNoConverters, {"tensorwise", "rowwise", "rowwise_with_gw_hp"}));
  f.push_back(accepted(f8, "filter_fqns", K::kList, "[]", kNoConverters));
  f.push_back(accepted(f8, "emulate", K::kBool, "false", kNoConverters));
  f.push_back(accepted("quantize.grouped_mm.float8", "fqns", K::kList, "[]", kNoConverters));
  const std::string mx = "quantize.linear.mx";
  f.push_back(accepted(mx, "mxfp8_dim1_cast_kernel_choice", K::kChoice, "\"triton\"", kNoConverters,
                       {"triton", "cuda", "torch"}));
  f.push_back(accepted(mx, "recipe_name", K::kString, "\"mxfp8_cublas\"", kNoConverters));
  f.push_back(accepted(mx, "filter_fqns", K::kList, "[ 'output' ]", kNoConverters));
  f.push_back(accepted("quantize.grouped_mm.mx", "recipe_name", K::kChoice, "\"mxfp8\"", kNoConverters, {"mxfp8"}));
  f.push_back(accepted("quantize.grouped_mm.mx", "fqns", K::kList, "[]", kNoConverters));
  // [comm]
  f.push_back(accepted("comm", "init_timeout_seconds", K::kInt, "300", kCommKnobs));
  f.push_back(accepted("comm", "train_timeout_seconds", K::kInt, "100", kCommKnobs));
  f.push_back(accepted("comm", "trace_buf_size", K::kInt, "20000", kNoProfiler));
  f.push_back(accepted("comm", "save_traces_folder", K::kString, "\"comm_traces\"", kNoProfiler));
  f.push_back(accepted("comm", "save_traces_file_prefix", K::kString, "\"rank_\"", kNoProfiler));
  f.push_back(accepted("comm", "mode", K::kChoice, "\"default\"", kCommKnobs, {"default", "fake_backend", "local_tensor"}));
  // [memory_estimation]
  f.push_back(accepted("memory_estimation", "enable", K::kBool, "false", kNoMemoryEstimation));
  f.push_back(accepted("memory_estimation", "disable_fake_mode", K::kBool, "false", kNoMemoryEstimation));
  // [fault_tolerance]
  f.push_back(accepted("fault_tolerance", "process_group", K::kString, "\"gloo\"", kNoFaultTolerance));
  f.push_back(accepted("fault_tolerance", "process_group_timeout_ms", K::kInt, "10000", kNoFaultTolerance));
  f.push_back(accepted("fault_tolerance", "replica_id", K::kInt, "0", kNoFaultTolerance));
  f.push_back(accepted("fault_tolerance", "group_size", K::kInt, "0", kNoFaultTolerance));
  f.push_back(accepted("fault_tolerance", "min_replica_size", K::kInt, "1", kNoFaultTolerance));
  f.push_back(accepted("fault_tolerance", "semi_sync_method", K::kString, "", kNoFaultTolerance));
  // [experimental]
  f.push_back(accepted("experimental", "custom_import", K::kString, "\"\"", kNoPython));
  f.push_back(accepted("experimental", "custom_args_module", K::kString, "\"\"", kNoPython));
  // [validation] (its [validation.dataloader] is above)
  f.push_back(accepted("validation", "enable", K::kBool, "false", kNoValidation));
  f.push_back(accepted("validation", "dataset", K::kString, "\"c4_validation\"", kNoValidation));
  f.push_back(accepted("validation", "dataset_path", K::kString, "", kNoValidation));
  f.push_back(accepted("validation", "local_batch_size", K::kInt, "8", kNoValidation));
  f.push_back(accepted("validation", "seq_len", K::kInt, "2048", kNoValidation));
  f.push_back(accepted("validation", "freq", K::kInt, "10", kNoValidation));
  f.push_back(accepted("validation", "steps", K::kInt, "-1", kNoValidation));
  // [debug] (seed and deterministic are real keys, in config_fields.cc)
  f.push_back(accepted("debug", "deterministic_warn_only", K::kBool, "false", kNoWarnings));
  f.push_back(accepted("debug", "moe_force_load_balance", K::kBool, "false", kDense));
}

}  // namespace config_table

std::string TrainConfig::no_effect_line() const {
  // Reasons in the order their first key was given, each with its keys.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (const auto& name : no_effect_keys) {
    const config_table::Field* f = config_table::find_field(name);
    if (f == nullptr || f->no_effect.empty()) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == f->no_effect; });
    if (it == groups.end()) it = groups.insert(groups.end(), {f->no_effect, {}});
    it->second.push_back(name);
  }
  // A real key that only checkpointing reads: named while checkpointing is off, as it would load nothing.
  if (!checkpoint.enable_checkpoint && !checkpoint.initial_load_path.empty()) {
    groups.emplace_back("checkpointing is off (checkpoint.enable = false), as TorchTitan ignores it then",
                        std::vector<std::string>{"checkpoint.initial_load_path"});
  }
  if (groups.empty()) return "";
  std::string line = "keys with no effect here:";
  for (size_t i = 0; i < groups.size(); ++i) {
    line += (i == 0 ? " " : "; ") + config_table::join(groups[i].second, ", ") + " (" + groups[i].first + ")";
  }
  return line;
}

}  // namespace fsdp::train
