// TorchTitan's own job files run unchanged: every key of its JobConfig (releases v0.2.0 to v0.2.2,
// torchtitan/config/job_config.py) is accepted, the keys without effect are named on one line, and a
// file with several mistakes reports all of them, in file order, each with its line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "train/config.h"

namespace fsdp::train {
namespace {

// Keys of JobConfig whose implementation belongs to other parts of this runtime (weights import/export,
// tokenizers and data sets): until they land they may be refused, and only
// they. The tests below hold either way.
const std::vector<std::string> kImplementedElsewhere = {
    "model.hf_assets_path",          "model.tokenizer_path",           "training.dataset",
    "training.dataset_path",         "checkpoint.initial_load_path",   "checkpoint.initial_load_model_only",
    "checkpoint.initial_load_in_hf", "checkpoint.initial_load_in_hf_quantized", "checkpoint.last_save_model_only",
    "checkpoint.last_save_in_hf",    "checkpoint.export_dtype"};

bool implemented_elsewhere(const std::string& line) {
  return std::any_of(kImplementedElsewhere.begin(), kImplementedElsewhere.end(),
                     [&](const std::string& key) { return line.find(key) != std::string::npos; });
}

// The problems a ConfigError lists, one per line, without the "N errors:" head.
std::vector<std::string> problems_of(const ConfigError& e) {
  std::vector<std::string> lines;
  std::istringstream in(e.what());
  for (std::string line; std::getline(in, line);) {
    if (!line.ends_with(" errors:")) lines.push_back(line.starts_with("  ") ? line.substr(2) : line);
  }
  return lines;
}

// Parses `text`; every problem it reports must be one of kImplementedElsewhere.
TrainConfig parse_allowing_elsewhere(const std::string& text, const std::string& source) {
  try {
    return parse_train_config(text, source);
  } catch (const ConfigError& e) {
    for (const auto& p : problems_of(e)) EXPECT_TRUE(implemented_elsewhere(p)) << p;
  }
  return TrainConfig{};
}

// Lines naming a key of kImplementedElsewhere dropped: what this
// part of the runtime must accept with no error at all.
std::string without_elsewhere_keys(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    const std::string key = line.substr(0, line.find_first_of(" ="));
    const bool elsewhere = std::any_of(kImplementedElsewhere.begin(), kImplementedElsewhere.end(),
                                       [&](const std::string& k) { return k.ends_with("." + key); }) &&
                           key != "mode" && key != "dataset";
    if (line.starts_with("dataset = \"c4")) {
      if (out.rfind("[training]") > out.rfind("[validation]") || out.find("[validation]") == std::string::npos) {
        continue;  // the training data set: the data part's
      }
      out += line + "\n";  // validation.dataset: accepted, no effect
    } else if (!elsewhere) {
      out += line + "\n";
    }
  }
  return out;
}

// TorchTitan v0.2.2, torchtitan/models/llama3/train_configs/debug_model.toml.
const char* const kDebugModelToml = R"([job]
dump_folder = "./outputs"
description = "Llama 3 debug training"
print_config = false

[profiling]
enable_profiling = false
save_traces_folder = "profile_trace"
profile_freq = 10
enable_memory_snapshot = false
save_memory_snapshot_folder = "memory_snapshot"

[metrics]
log_freq = 1
disable_color_printing = false
enable_tensorboard = false
save_tb_folder = "tb"
enable_wandb = false

[model]
name = "llama3"
flavor = "debugmodel"
# test folder with tokenizer.json, for debug purpose only
hf_assets_path = "./tests/assets/tokenizer"
# converters = ["float8"]

[optimizer]
name = "AdamW"
lr = 8e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 2  # lr scheduler warm up, normally 20% of the train steps
decay_ratio = 0.8  # lr scheduler decay ratio, 80% of the train steps
decay_type = "linear"
min_lr_factor = 0.0

[training]
local_batch_size = 8
seq_len = 2048
max_norm = 1.0  # grad norm clipping
steps = 10
dataset = "c4_test"  # supported datasets: c4_test (2K), c4 (177M)

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
fsdp_reshard_after_forward = "default" # default / never / always
tensor_parallel_degree = 1
enable_async_tensor_parallel = false
pipeline_parallel_degree = 1
pipeline_parallel_schedule = "Interleaved1F1B"
context_parallel_degree = 1

[checkpoint]
enable = false
folder = "checkpoint"
interval = 10
last_save_model_only = false
export_dtype = "float32"
async_mode = "disabled"  # ["disabled", "async", "async_with_pinned_mem"]

[activation_checkpoint]
mode = "selective"  # ["none", "selective", "full"]
selective_ac_option = '2'  # 'int' = ac every positive int layer or 'op', ac based on ops policy

[compile]
enable=false
components = ["model", "loss"]

[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = ["output"]

[validation]
enable = false
dataset = "c4_validation"
freq = 5
steps = 10
)";

// TorchTitan v0.2.2, torchtitan/models/llama3/train_configs/llama3_8b.toml.
const char* const kLlama8bToml = R"(# NOTE: this toml config is a preset for 64 A100 GPUs.

[job]
dump_folder = "./outputs"
description = "Llama 3 8B training"

[profiling]
enable_profiling = true
save_traces_folder = "profile_trace"
profile_freq = 100

[metrics]
log_freq = 10
enable_tensorboard = true
save_tb_folder = "tb"

[model]
name = "llama3"
flavor = "8B"
hf_assets_path = "./assets/hf/Llama-3.1-8B"
# converters = ["float8"]

[optimizer]
name = "AdamW"
lr = 3e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 200  # lr scheduler warm up

[training]
local_batch_size = 1
seq_len = 8192
max_norm = 1.0  # grad norm clipping
steps = 1000
dataset = "c4"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1

[checkpoint]
enable = false
folder = "checkpoint"
interval = 500
last_save_model_only = true
export_dtype = "float32"
async_mode = "disabled" # ["disabled", "async", "async_with_pinned_mem"]

[compile]
enable=false
components = ["model", "loss"]

[activation_checkpoint]
mode = "selective"  # ["none", "selective", "full"]
selective_ac_option = "op"  # "int" = ac every positive int layer or 'op', ac based on ops policy

[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = ["output"]

[validation]
enable = false
dataset = "c4_validation"
freq = 500
steps = 1200 # Recommend value for c4_validation with world-size=8 and seq_len=8192
)";

// Every key of JobConfig v0.2.2 at TorchTitan's default (None defaults given a value of their type),
// plus the keys v0.2.0 had in other places (training.seed, training.deterministic,
// training.debug_moe_force_load_balance, parallelism.enable_compiled_autograd); without the keys of
// kImplementedElsewhere.
const char* const kEveryKeyToml = R"([job]
config_file = "job.toml"
dump_folder = "./outputs"
description = "default job"
print_config = false
save_config_file = "saved.toml"
custom_config_module = ""

[profiling]
enable_profiling = false
save_traces_folder = "profile_traces"
profile_freq = 10
profiler_active = 1
profiler_warmup = 3
enable_memory_snapshot = false
save_memory_snapshot_folder = "memory_snapshot"

[metrics]
log_freq = 10
enable_tensorboard = false
disable_color_printing = false
save_tb_folder = "tb"
save_for_all_ranks = false
enable_wandb = false

[model]
name = "llama3"
flavor = "debugmodel"
converters = []
print_after_conversion = false

[optimizer]
name = "AdamW"
lr = 8e-4
beta1 = 0.9
beta2 = 0.95
eps = 1e-8
weight_decay = 0.1
implementation = "fused"
early_step_in_backward = false

[lr_scheduler]
warmup_steps = 200
total_steps = 10000
decay_ratio = 0.8
decay_type = "linear"
min_lr_factor = 0.0

[training]
local_batch_size = 8
global_batch_size = -1
seq_len = 2048
max_norm = 1.0
steps = 10000
enable_cpu_offload = false
dtype = "float32"
mixed_precision_param = "bfloat16"
mixed_precision_reduce = "float32"
gc_freq = 50
gc_debug = false
seed = 0
deterministic = false
debug_moe_force_load_balance = false

[training.dataloader]
num_workers = 0
persistent_workers = false
pin_memory = false
prefetch_factor = 2

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
fsdp_reshard_after_forward = "default"
tensor_parallel_degree = 1
disable_loss_parallel = false
enable_async_tensor_parallel = false
enable_compiled_autograd = false
pipeline_parallel_degree = 1
module_fqns_per_model_part = [["tok_embeddings", "layers.0"], ["layers.1", "norm", "output"]]
pipeline_parallel_first_stage_less_layers = 1
pipeline_parallel_last_stage_less_layers = 1
pipeline_parallel_layers_per_stage = 2
pipeline_parallel_schedule = "1F1B"
pipeline_parallel_schedule_csv = ""
pipeline_parallel_microbatch_size = 1
pipeline_parallel_expert_parallel_overlap = true
context_parallel_degree = 1
context_parallel_load_balancer = "headtail"
context_parallel_rotate_method = "allgather"
expert_parallel_degree = 1
expert_tensor_parallel_degree = 1
expert_parallel_comm_backend = "standard"

[checkpoint]
enable = false
enable_ft_dataloader_checkpoints = true
folder = "checkpoint"
interval = 500
async_mode = "disabled"
keep_latest_k = 10
load_step = -1
exclude_from_loading = []
enable_first_step_checkpoint = false
create_seed_checkpoint = false
load_only = false

[activation_checkpoint]
selective_ac_option = "2"
per_op_sac_force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]
early_stop = false
memory_budget = 0.5
visualize_memory_budget_pareto = false
preserve_rng_state = true
determinism_check = "default"
debug = false

[compile]
enable = false
components = ["model", "loss"]
backend = "inductor"

[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
recipe_name = "rowwise"
filter_fqns = []
emulate = false

[quantize.linear.mx]
mxfp8_dim1_cast_kernel_choice = "triton"
recipe_name = "mxfp8_cublas"
filter_fqns = ["output"]

[quantize.grouped_mm.float8]
fqns = []

[quantize.grouped_mm.mx]
recipe_name = "mxfp8"
fqns = "experts"

[comm]
init_timeout_seconds = 300
train_timeout_seconds = 100
trace_buf_size = 20000
save_traces_folder = "comm_traces"
save_traces_file_prefix = "rank_"
mode = "default"

[memory_estimation]
enable = false
disable_fake_mode = false

[fault_tolerance]
enable = false
process_group = "gloo"
process_group_timeout_ms = 10000
replica_id = 0
group_size = 0
min_replica_size = 1
semi_sync_method = "diloco"

[experimental]
custom_import = ""
custom_args_module = ""

[validation]
enable = false
dataset = "c4_validation"
dataset_path = "/data/c4_validation"
local_batch_size = 8
seq_len = 2048
freq = 10
steps = -1

[validation.dataloader]
num_workers = 0
persistent_workers = false
pin_memory = false
prefetch_factor = 2

[debug]
seed = 0
deterministic = false
deterministic_warn_only = false
moe_force_load_balance = false
)";

TEST(TorchTitanConfig, EveryJobConfigKeyLoads) {
  TrainConfig c;
  ASSERT_NO_THROW(c = parse_train_config(kEveryKeyToml, "every_key.toml"));
  EXPECT_EQ(c.lr_scheduler.total_steps, 10000);
  EXPECT_EQ(c.torchtitan_only.at("parallelism.module_fqns_per_model_part"),
            "[ [ 'tok_embeddings', 'layers.0' ], [ 'layers.1', 'norm', 'output' ] ]");
  EXPECT_EQ(c.torchtitan_only.at("quantize.grouped_mm.mx.fqns"), "\"experts\"");
  // Every key of the file is one of ours, and the resolved configuration reads back the same.
  const std::string text = c.to_toml();
  EXPECT_EQ(parse_train_config(text, "resolved.toml").to_toml(), text);
  c.validate(1);
  EXPECT_EQ(c.model_spec().dims.dim, 256);
}

TEST(TorchTitanConfig, KeysWithoutEffectAreNamedOnOneLine) {
  const TrainConfig c = parse_train_config(kEveryKeyToml, "every_key.toml");
  const std::string line = c.no_effect_line();
  EXPECT_EQ(line.find('\n'), std::string::npos);
  for (const char* part : {"keys with no effect here: job.config_file, job.save_config_file (the job file is named",
                           "compile.enable, compile.components, compile.backend (no graph compiler",
                           "metrics.enable_tensorboard", "profiling.enable_profiling",
                           "quantize.linear.float8.emulate", "validation.dataloader.pin_memory"}) {
    EXPECT_NE(line.find(part), std::string::npos) << part << " not in: " << line;
  }
  // Implemented keys are not on it, nor the parallel degrees (1 is what this runtime does).
  for (const char* absent : {"training.steps", "debug.seed", "checkpoint.enable,", "tensor_parallel_degree"}) {
    EXPECT_EQ(line.find(absent), std::string::npos) << absent << " in: " << line;
  }
  EXPECT_EQ(parse_train_config("[training]\nsteps = 3\n", "x.toml").no_effect_line(), "");
}

// checkpoint.initial_load_in_hf_quantized (v0.2.2) is accepted with no effect; initial_load_path is
// named on the same line while checkpointing is off (TorchTitan ignores it then too), not otherwise.
TEST(TorchTitanConfig, CheckpointKeysIgnoredWhileOffAreNamed) {
  const char* text = "[checkpoint]\ninitial_load_in_hf_quantized = false\ninitial_load_path = './weights'\n";
  const std::string off = parse_train_config(text, "off.toml").no_effect_line();
  EXPECT_NE(off.find("checkpoint.initial_load_in_hf_quantized (quantized Hugging Face weights are not read"),
            std::string::npos)
      << off;
  EXPECT_NE(off.find("checkpoint.initial_load_path (checkpointing is off"), std::string::npos) << off;
  const std::string on = parse_train_config(std::string(text) + "enable = true\n", "on.toml").no_effect_line();
  EXPECT_EQ(on.find("initial_load_path"), std::string::npos) << on;
  EXPECT_NE(on.find("initial_load_in_hf_quantized"), std::string::npos) << on;
}

TEST(TorchTitanConfig, RealDebugModelAndLlama8bFilesLoad) {
  for (const auto& [text, name] : {std::pair{kDebugModelToml, "debug_model.toml"}, {kLlama8bToml, "llama3_8b.toml"}}) {
    parse_allowing_elsewhere(text, name);
    TrainConfig c;
    ASSERT_NO_THROW(c = parse_train_config(without_elsewhere_keys(text), name)) << name;
    EXPECT_FALSE(c.checkpoint.enable_checkpoint);
    EXPECT_FALSE(c.no_effect_line().empty());
  }
  TrainConfig debug = parse_train_config(without_elsewhere_keys(kDebugModelToml), "debug_model.toml");
  EXPECT_EQ(debug.training.steps, 10);
  EXPECT_EQ(*debug.lr_scheduler.decay_ratio, 0.8);
  debug.validate(2);
  const spec::ModelSpec m = debug.model_spec();
  EXPECT_EQ(m.dims.dim, 256);
  EXPECT_EQ(m.dims.layers, 6);
  EXPECT_EQ(m.dims.n_heads, 16);
  EXPECT_EQ(m.dims.n_kv_heads, 16);  // n_kv_heads unset: as many as query heads
  EXPECT_EQ(m.dims.ffn_hidden, 768);  // int(2 x 4 x 256 / 3) = 682 rounded up to multiple_of 256
  EXPECT_EQ(m.dims.vocab, 2048);
  EXPECT_DOUBLE_EQ(debug.model.rope_theta, 500000);
  // What the files say about activation checkpointing is what runs.
  EXPECT_EQ(debug.activation_checkpoint.mode, spec::ActivationCheckpointing::kSelective);
  EXPECT_EQ(debug.activation_checkpoint.selective_ac_every, 2);

  TrainConfig llama8b = parse_train_config(without_elsewhere_keys(kLlama8bToml), "llama3_8b.toml");
  EXPECT_EQ(llama8b.model_spec().dims.ffn_hidden, 14336);
  EXPECT_EQ(llama8b.activation_checkpoint.mode, spec::ActivationCheckpointing::kSelective);
  EXPECT_EQ(llama8b.activation_checkpoint.selective_ac_every, 0);  // "op"
  EXPECT_NE(llama8b.no_effect_line().find("profiling.enable_profiling, profiling.save_traces_folder, "
                                          "profiling.profile_freq (no PyTorch profiler"),
            std::string::npos)
      << llama8b.no_effect_line();
}

TEST(TorchTitanConfig, ByteVocabularyFlavorKeepsItsOwnName) {
  TrainConfig c;
  c.model.flavor = "debugmodel_byte";
  const spec::ModelSpec m = c.model_spec();
  EXPECT_EQ(m.dims.dim, 128);
  EXPECT_EQ(m.dims.layers, 4);
  EXPECT_EQ(m.dims.vocab, 256);
  EXPECT_EQ(m.dims.ffn_hidden, 384);
}

TEST(TorchTitanConfig, EveryMistakeInFileOrderWithItsLine) {
  const char* text =
      "[training]\n"                         // 1
      "steps = 0\n"                          // 2: out of range
      "seq_len = \"long\"\n"                 // 3: wrong type
      "[optimizer]\n"                        // 4
      "name = \"Adam\"\n"                    // 5: not a choice
      "lrr = 1e-3\n"                         // 6: unknown key
      "[parallelism]\n"                      // 7
      "tensor_parallel_degree = 2\n"         // 8: not implemented
      "[trainig]\n"                          // 9: unknown section
      "steps = 3\n"                          // 10
      "[activation_checkpoint]\n"            // 11
      "mode = \"memory_budget\"\n"           // 12: not supported
      "[compile]\n"                          // 13
      "enable = 1\n";                        // 14: wrong type for an accepted key
  try {
    parse_train_config(text, "bad.toml");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string all = e.what();
    EXPECT_TRUE(all.starts_with("8 errors:\n")) << all;
    const std::vector<std::string> got = problems_of(e);
    const std::vector<std::pair<std::string, std::string>> want = {
        {"bad.toml:2:", "training.steps: must be positive"},
        {"bad.toml:3:", "training.seq_len: expected an integer, got a string"},
        {"bad.toml:5:", "optimizer.name: 'Adam' is not one of AdamW, SGD"},
        {"bad.toml:6:", "unknown key 'optimizer.lrr'"},
        {"bad.toml:8:", "parallelism.tensor_parallel_degree: is 2, but tensor parallelism is not implemented"},
        {"bad.toml:9:", "unknown section [trainig]"},
        {"bad.toml:12:", "activation_checkpoint.mode: 'memory_budget'"},
        {"bad.toml:14:", "compile.enable: expected true or false, got an integer"}};
    ASSERT_EQ(got.size(), want.size()) << all;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(got[i].starts_with(want[i].first)) << got[i];
      EXPECT_NE(got[i].find(want[i].second), std::string::npos) << got[i];
    }
  }
}

// The cross-key checks of validate() report every independent problem too (the batch only once the
// mesh resolves).
TEST(TorchTitanConfig, ValidateReportsEveryIndependentProblem) {
  TrainConfig c = parse_train_config(
      "[model]\nn_heads = 5\nvocab_size = 100\n[training]\nlocal_batch_size = 4\nglobal_batch_size = 10\n", "v.toml");
  try {
    c.validate(2);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::vector<std::string> got = problems_of(e);
    ASSERT_EQ(got.size(), 4u) << e.what();
    EXPECT_NE(got[0].find("training.global_batch_size = 10"), std::string::npos) << got[0];
    EXPECT_NE(got[1].find("model.n_heads = 5 does not divide model.dim = 256"), std::string::npos) << got[1];
    EXPECT_NE(got[2].find("model.n_kv_heads = 16 does not divide model.n_heads = 5"), std::string::npos) << got[2];
    EXPECT_NE(got[3].find("model.vocab_size must be >= 256"), std::string::npos) << got[3];
  }
}

TEST(TorchTitanConfig, ParallelDegreesOfOneOnly) {
  for (const char* key : {"tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree",
                          "expert_tensor_parallel_degree"}) {
    const std::string base = std::string("[parallelism]\n") + key + " = ";
    EXPECT_NO_THROW(parse_train_config(base + "1\n", "p.toml")) << key;
    try {
      parse_train_config(base + "4\n", "p.toml");
      ADD_FAILURE() << key << " = 4 accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("p.toml:2:")), std::string::npos) << msg;
      EXPECT_NE(msg.find("is 4, but"), std::string::npos) << msg;
      EXPECT_NE(msg.find("use 1"), std::string::npos) << msg;
    }
  }
}

CommandLine command_line(std::vector<const char*> args) {
  args.insert(args.begin(), "fsdp-train");
  return parse_command_line(static_cast<int>(args.size()), args.data());
}

TEST(TorchTitanConfig, CheckpointEnableUnderBothNames) {
  EXPECT_TRUE(parse_train_config("[checkpoint]\nenable = true\n", "c.toml").checkpoint.enable_checkpoint);
  EXPECT_TRUE(parse_train_config("[checkpoint]\nenable_checkpoint = true\n", "c.toml").checkpoint.enable_checkpoint);
  EXPECT_TRUE(load_train_config(command_line({"--checkpoint.enable"})).checkpoint.enable_checkpoint);
  EXPECT_TRUE(load_train_config(command_line({"--checkpoint.enable_checkpoint", "true"})).checkpoint.enable_checkpoint);
}

TEST(TorchTitanConfig, NoPrefixSetsABooleanFalse) {
  TrainConfig c = load_train_config(
      command_line({"--checkpoint.enable", "--checkpoint.no_enable", "--training.deterministic",
                    "--training.no_deterministic", "--compile.no_enable"}));
  EXPECT_FALSE(c.checkpoint.enable_checkpoint);
  EXPECT_FALSE(c.training.deterministic);
  EXPECT_EQ(c.torchtitan_only.at("compile.enable"), "false");
  // Only booleans have a no_ form.
  EXPECT_THROW(command_line({"--training.no_steps"}), ConfigError);
}

TEST(TorchTitanConfig, ListKeysFromTheCommandLine) {
  const TrainConfig c = load_train_config(command_line({"--compile.components", "model,loss"}));
  EXPECT_EQ(c.torchtitan_only.at("compile.components"), "[ 'model', 'loss' ]");
  EXPECT_EQ(parse_train_config(c.to_toml(), "r.toml").torchtitan_only.at("compile.components"), "[ 'model', 'loss' ]");
}

TEST(TorchTitanConfig, FileAndFlagMistakesTogether) {
  const std::string path = ::testing::TempDir() + "/two_mistakes.toml";
  {
    std::ofstream(path) << "[training]\nsteps = -1\n[metrics]\nlog_freq = 0\n";
  }
  try {
    load_train_config(command_line({"--config", path.c_str(), "--optimizer.lr", "fast"}));
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::vector<std::string> got = problems_of(e);
    ASSERT_EQ(got.size(), 3u) << e.what();
    EXPECT_TRUE(got[0].starts_with(path + ":2:")) << got[0];
    EXPECT_TRUE(got[1].starts_with(path + ":4:")) << got[1];
    EXPECT_TRUE(got[2].starts_with("--optimizer.lr")) << got[2];
  }
  try {
    command_line({"--training.stepz=3", "stray", "--optimizer.lrr", "1"});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(problems_of(e).size(), 3u) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace fsdp::train
