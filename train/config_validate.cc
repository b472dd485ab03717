// What a configuration means once read: the model it builds, its learning-rate schedule and paths;
// resolve_keys(world_size), which resolves the -1 degrees and the global batch into one mesh and checks
// the rules that span keys; and validate(), which adds every path (config_paths.h) and the memory fit
// (config_memory_fit.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "spec/spec_error.h"
#include "train/config.h"
#include "train/config_fields.h"
#include "train/config_paths.h"
#include "train/data_setup.h"

namespace fsdp::train {
namespace {

// Our byte-vocabulary flavor keeps its FFN rounding (multiple_of 64) open to dimension overrides; every
// other flavor is a planner preset.
bool is_preset_flavor(std::string_view flavor) { return flavor != "debugmodel_byte"; }

std::string preset_name(std::string_view flavor) {
  for (const auto& [alias, preset] : config_table::flavor_aliases()) {
    if (alias == flavor) return preset;
  }
  return std::string(flavor);
}

}  // namespace

spec::ModelDims TrainConfig::model_dims() const {
  spec::ModelDims d;
  int64_t multiple_of = spec::kDebugModelMultipleOf;
  if (!is_preset_flavor(model.flavor)) {
    d = spec::debug_model_dims();
  } else {
    d = spec::model_preset(preset_name(model.flavor)).dims;
    // A preset's FFN width stands unless a key reshapes it; rounding up to that width itself gives it back
    // when only model.ffn_dim_multiplier is set.
    multiple_of = d.ffn_hidden;
    if (model.dim && *model.dim != d.dim && !model.multiple_of) {
      throw ConfigError("model.dim = " + std::to_string(*model.dim) + " overrides flavor '" + model.flavor + "' (dim " +
                        std::to_string(d.dim) +
                        "): also set model.multiple_of (and model.ffn_dim_multiplier) so the FFN width is defined");
    }
  }
  if (model.dim) d.dim = *model.dim;
  if (model.n_layers) d.layers = *model.n_layers;
  if (model.n_heads) d.n_heads = *model.n_heads;
  if (model.n_kv_heads) d.n_kv_heads = *model.n_kv_heads;
  if (model.vocab_size) d.vocab = *model.vocab_size;
  if (model.multiple_of) multiple_of = *model.multiple_of;
  if (model.dim || model.multiple_of || model.ffn_dim_multiplier) {
    d.ffn_hidden = spec::llama_ffn_hidden(d.dim, multiple_of, model.ffn_dim_multiplier.value_or(0));
  }
  d.norm_eps = static_cast<float>(model.norm_eps);
  d.rope_theta = static_cast<float>(model.rope_theta);
  d.rope_scaling.reset();
  if (model.rope_scaling) {
    d.rope_scaling =
        spec::RopeScaling{.factor = model.rope_scaling_factor,
                          .low_freq_factor = model.rope_low_freq_factor,
                          .high_freq_factor = model.rope_high_freq_factor,
                          .original_context = static_cast<double>(model.rope_original_max_position_embeddings)};
  }
  return d;
}

std::string TrainConfig::model_name() const {
  return is_preset_flavor(model.flavor) ? preset_name(model.flavor) : "llama3-" + model.flavor;
}

spec::ModelSpec TrainConfig::model_spec() const {
  try {
    return spec::make_llama(model_name(), model_dims());
  } catch (const InputError& e) {
    throw ConfigError(std::string("[model]: ") + e.what());
  }
}

spec::Policy TrainConfig::policy() const {
  spec::Policy p;
  p.param_dtype = training.mixed_precision_param;
  p.reduce_dtype = training.mixed_precision_reduce;
  p.param_comm = training.param_comm_dtype;
  p.grad_comm = training.grad_comm_dtype;
  p.optimizer = optimizer.name;
  p.reshard = parallelism.fsdp_reshard_after_forward;
  p.prefetch = parallelism.prefetch;
  p.ac = activation_checkpoint.mode;
  p.ac_every = p.ac == spec::ActivationCheckpointing::kSelective ? activation_checkpoint.selective_ac_every : 0;
  p.micro_batch = training.local_batch_size;
  p.seq_len = training.seq_len;
  p.grad_accum = training.gradient_accumulation_steps;
  p.redundancy =
      resolved_mesh ? fault_tolerance.effective_redundancy(*resolved_mesh) : fault_tolerance.effective_redundancy();
  return p;
}

spec::JobSpec TrainConfig::job_spec() const {
  return spec::JobSpec{model_spec(), policy(), mesh().with_expert_parallel(parallelism.expert_parallel_degree),
                       fault_tolerance};
}

runtime::LrSchedule TrainConfig::lr_schedule() const {
  runtime::LrSchedule s;
  s.lr = optimizer.lr;
  const int64_t steps = lr_scheduler.total_steps.value_or(training.steps);
  s.total_steps = steps;
  s.warmup_steps = lr_scheduler.warmup_steps;
  s.decay = runtime::parse_decay_type(lr_scheduler.decay_type);
  s.min_lr_factor = lr_scheduler.min_lr_factor;
  if (lr_scheduler.decay_ratio) {
    // TorchTitan: round(steps * decay_ratio) decay steps (Python's round, half to even); LrSchedule
    // cuts them to what warm-up leaves.
    s.decay_steps = static_cast<int64_t>(std::nearbyint(static_cast<double>(steps) * *lr_scheduler.decay_ratio));
  }
  return s;
}

std::string TrainConfig::resolve_path(const std::string& path) const {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(job.dump_folder) / path).string();
}

namespace {

// Resolves the -1 degrees into c.resolved_mesh and checks the reshard group against the shard degree.
void resolve_mesh(TrainConfig& c, int64_t world_size) {
  if (world_size < 1) throw ConfigError("world size must be >= 1, got " + std::to_string(world_size));
  auto& p = c.parallelism;
  try {
    // The mesh resolves the -1 degree (spec::resolve_degrees); the keys take the resolved values.
    c.resolved_mesh = spec::Mesh::for_world(world_size, p.data_parallel_replicate_degree, p.data_parallel_shard_degree);
    p.data_parallel_replicate_degree = c.resolved_mesh->replicate_degree();
    p.data_parallel_shard_degree = c.resolved_mesh->shard_degree();
    spec::check_reshard_group(p.fsdp_reshard_after_forward, p.data_parallel_shard_degree);
  } catch (const spec::SpecError& e) {
    throw ConfigError(e.what());
  }
}

// Resolves global_batch_size -1 and gradient_accumulation_steps over the resolved mesh.
void resolve_batch(TrainConfig& c) {
  auto& t = c.training;
  const auto& p = c.parallelism;
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
}

// Every problem of the model keys, each independent of the others.
std::vector<std::string> model_problems(const TrainConfig& c) {
  std::vector<std::string> problems;
  const spec::ModelDims m = c.model_dims();
  const int64_t kv = m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads;
  if (m.dim % m.n_heads != 0) {
    problems.push_back("model.n_heads = " + std::to_string(m.n_heads) +
                       " does not divide model.dim = " + std::to_string(m.dim));
  }
  if (m.n_heads % kv != 0) {
    problems.push_back("model.n_kv_heads = " + std::to_string(kv) +
                       " does not divide model.n_heads = " + std::to_string(m.n_heads));
  }
  if (c.model.rope_scaling && !(c.model.rope_high_freq_factor > c.model.rope_low_freq_factor)) {
    problems.push_back("model.rope_high_freq_factor = " + std::to_string(c.model.rope_high_freq_factor) +
                       " must exceed model.rope_low_freq_factor = " + std::to_string(c.model.rope_low_freq_factor) +
                       " (or set model.rope_scaling = false)");
  }
  if (m.dim % m.n_heads == 0 && (m.dim / m.n_heads) % 2 != 0) {
    problems.push_back("head dim model.dim / model.n_heads = " + std::to_string(m.dim / m.n_heads) +
                       " must be even for rotary embeddings");
  }
  if (c.training.dataset == "tiny_corpus" && tokenizer_path_of(c).empty() && m.vocab < 256) {
    problems.push_back("training.dataset = \"tiny_corpus\" needs byte tokens: model.vocab_size must be >= 256, got " +
                       std::to_string(m.vocab));
  }
  if (c.training.dataset == "synthetic" && m.vocab < 2) {
    problems.push_back("training.dataset = \"synthetic\" needs model.vocab_size >= 2");
  }
  const int64_t ep = c.parallelism.expert_parallel_degree;
  if (ep > 1) {
    try {
      const int64_t shard = c.resolved_mesh ? c.resolved_mesh->shard_degree() : ep;
      spec::check_expert_parallel(spec::make_llama("model", m), ep, shard);
    } catch (const spec::SpecError& e) {
      problems.push_back(e.what());
    }
    // Safetensors in or out (runtime/checkpoint/safetensors.h); checkpoints themselves reshard across degrees.
    const auto& ck = c.checkpoint;
    const bool safetensors_in = ck.initial_load_in_hf || ck.initial_load_path.ends_with(".safetensors");
    const bool safetensors_out =
        ck.last_save_model_only && (ck.export_dtype != DataType::kFloat32 || ck.last_save_in_hf);
    if (ck.enable_checkpoint && (safetensors_in || safetensors_out)) {
      problems.push_back(std::string("checkpoint.") + (safetensors_in ? "initial_load_path" : "last_save_model_only") +
                         ": safetensors " + (safetensors_in ? "import" : "export") +
                         " with parallelism.expert_parallel_degree = " + std::to_string(ep) +
                         " is not implemented (sharded checkpoints are)");
    }
  }
  return problems;
}

}  // namespace

namespace {

// Runs `step`, adding its ConfigError to `problems`; true when it passed.
bool collect(std::vector<std::string>& problems, const std::function<void()>& step) {
  try {
    step();
    return true;
  } catch (const ConfigError& e) {
    problems.push_back(e.what());
    return false;
  }
}

// Every independent mistake of the keys at once: the mesh, then the batch over it (skipped when the mesh
// is wrong), then each model check.
std::vector<std::string> key_problems(TrainConfig& c, int64_t world_size) {
  std::vector<std::string> problems;
  if (collect(problems, [&] { resolve_mesh(c, world_size); })) collect(problems, [&] { resolve_batch(c); });
  collect(problems, [&] { resolve_data_config(c); });  // the tokenizer sets a floor under the vocabulary
  collect(problems, [&] {
    for (auto& problem : model_problems(c)) problems.push_back(std::move(problem));
  });
  if (c.resolved_mesh) {
    try {
      spec::check_fault_tolerance(spec::JobSpec{{}, c.policy(), *c.resolved_mesh, c.fault_tolerance});
    } catch (const spec::SpecError& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

}  // namespace

void TrainConfig::resolve_keys(int64_t world_size) {
  const auto problems = key_problems(*this, world_size);
  if (!problems.empty()) config_table::throw_config_errors(problems);
}

void TrainConfig::validate(int64_t world_size) {
  auto problems = key_problems(*this, world_size);
  for (auto& problem : path_problems(*this)) problems.push_back(std::move(problem));
  std::vector<std::string> fit;
  if (resolved_mesh) collect(fit, [&] { check_fits_machine_memory(); });
  // A model key that breaks the dimensions breaks the fit the same way: said once.
  if (!fit.empty() && std::find(problems.begin(), problems.end(), fit.front()) == problems.end()) {
    problems.push_back(fit.front());
  }
  if (!problems.empty()) config_table::throw_config_errors(problems);
}

const spec::Mesh& TrainConfig::mesh() const {
  if (!resolved_mesh) throw ConfigError("the configuration has no mesh before validate(world_size)");
  return *resolved_mesh;
}

}  // namespace fsdp::train
