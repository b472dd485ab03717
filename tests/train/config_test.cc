#include "train/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace fsdp::train {
namespace {

// Runs `fn`, expecting a ConfigError whose message contains every piece of `parts`.
template <class Fn>
void expect_config_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected ConfigError containing '" << parts.front() << "'";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

CommandLine command_line(std::vector<const char*> args) {
  args.insert(args.begin(), "fsdp-train");
  return parse_command_line(static_cast<int>(args.size()), args.data());
}

TEST(TrainConfig, ParsesDebugModelConfig) {
  TrainConfig c = load_train_config_file(FSDP_DEBUG_MODEL_CONFIG);
  EXPECT_EQ(c.model.flavor, "debugmodel_byte");
  EXPECT_EQ(c.training.steps, 20);
  EXPECT_EQ(c.training.local_batch_size, 4);
  EXPECT_EQ(c.training.seq_len, 128);
  EXPECT_EQ(c.metrics.log_freq, 1);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 8e-4);
  EXPECT_EQ(c.optimizer.name, spec::Optimizer::kAdamW);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 2);
  EXPECT_DOUBLE_EQ(c.training.max_norm, 1.0);
  EXPECT_EQ(c.training.mixed_precision_param, DataType::kFloat32);
  EXPECT_EQ(c.training.mixed_precision_reduce, DataType::kFloat32);
  EXPECT_EQ(c.parallelism.fsdp_reshard_after_forward.mode, spec::Reshard::Mode::kDefault);

  c.validate(2);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, 2);
  EXPECT_EQ(c.training.global_batch_size, 8);
  EXPECT_EQ(c.training.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.metrics_path(), "./outputs/debug_model/metrics.jsonl");

  const spec::ModelSpec m = c.model_spec();
  EXPECT_EQ(m.dims.dim, 128);
  EXPECT_EQ(m.dims.layers, 4);
  EXPECT_EQ(m.dims.n_heads, 8);
  EXPECT_EQ(m.dims.n_kv_heads, 4);
  EXPECT_EQ(m.dims.vocab, 256);
  EXPECT_EQ(m.dims.ffn_hidden, 384);
  EXPECT_LT(m.num_params(), 1'000'000);
}

TEST(TrainConfig, DefaultsAreTorchTitans) {
  const TrainConfig c;
  EXPECT_EQ(c.training.local_batch_size, 8);
  EXPECT_EQ(c.training.seq_len, 2048);
  EXPECT_EQ(c.training.mixed_precision_param, DataType::kBfloat16);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, -1);
  EXPECT_EQ(c.lr_scheduler.warmup_steps, 200);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.checkpoint.keep_latest_k, 10);
}

TEST(TrainConfig, UnknownKeyNamesKeyFileAndLine) {
  expect_config_error([] { parse_train_config("[training]\nsteps = 3\nstepz = 4\n", "job.toml"); },
                      {"job.toml:3:", "unknown key 'training.stepz'", "steps"});
}

TEST(TrainConfig, UnknownSectionNamesLine) {
  expect_config_error([] { parse_train_config("[job]\ndescription = \"x\"\n\n[trainig]\nsteps = 3\n", "job.toml"); },
                      {"job.toml:4:", "unknown section [trainig]", "training"});
}

TEST(TrainConfig, WrongTypeNamesKeyAndLine) {
  expect_config_error([] { parse_train_config("[training]\n\nsteps = \"20\"\n", "job.toml"); },
                      {"job.toml:3:", "training.steps", "expected an integer, got a string"});
  expect_config_error([] { parse_train_config("[optimizer]\nlr = true\n", "job.toml"); },
                      {"job.toml:2:", "optimizer.lr", "expected a number"});
  expect_config_error([] { parse_train_config("training = 5\n", "job.toml"); }, {"job.toml:1:", "must be a table"});
}

// parallelism.expert_parallel_degree: checked against the MoE model and the resolved shard degree.
TEST(TrainConfig, ExpertParallelDegree) {
  const auto moe = [] {
    return parse_train_config("[model]\nflavor = \"debugmodel_byte_moe\"\n[parallelism]\nexpert_parallel_degree = 2\n",
                              "job.toml");
  };
  EXPECT_NO_THROW(moe().validate(4));
  expect_config_error([&] { moe().validate(3); },
                      {"parallelism.expert_parallel_degree = 2 must divide the data-parallel shard degree 3"});
  expect_config_error(
      [] { parse_train_config("[parallelism]\nexpert_parallel_degree = 2\n", "job.toml").validate(2); },
      {"parallelism.expert_parallel_degree = 2 needs a MoE model"});
  expect_config_error(
      [] {
        parse_train_config("[model]\nflavor = \"debugmodel_byte_moe\"\n[parallelism]\nexpert_parallel_degree = 2\n"
                           "[checkpoint]\nenable = true\nexport_dtype = \"bfloat16\"\n",
                           "job.toml")
            .validate(2);
      },
      {"checkpoint.last_save_model_only: safetensors export", "expert_parallel_degree = 2", "not implemented"});
  EXPECT_NO_THROW(parse_train_config("[model]\nflavor = \"debugmodel_byte_moe\"\n[parallelism]\n"
                                     "expert_parallel_degree = 2\n[checkpoint]\nenable = true\n",
                                     "job.toml")
                      .validate(2));
  expect_config_error([] { parse_train_config("[parallelism]\nexpert_parallel_degree = 0\n", "job.toml"); },
                      {"job.toml:2:", "parallelism.expert_parallel_degree", "must be positive"});
}

TEST(TrainConfig, IntegerAcceptedWhereAFloatIsExpected) {
  EXPECT_DOUBLE_EQ(parse_train_config("[optimizer]\nlr = 1\n", "x.toml").optimizer.lr, 1.0);
}

TEST(TrainConfig, BadEnumValueListsChoices) {
  expect_config_error([] { parse_train_config("[optimizer]\nname = \"Adam\"\n", "job.toml"); },
                      {"job.toml:2:", "optimizer.name", "'Adam' is not one of AdamW, SGD"});
  expect_config_error([] { parse_train_config("[model]\nflavor = \"huge\"\n", "job.toml"); },
                      {"job.toml:2:", "model.flavor", "debugmodel", "llama3-8b"});
  expect_config_error(
      [] { parse_train_config("[parallelism]\nfsdp_reshard_after_forward = \"sometimes\"\n", "job.toml"); },
      {"job.toml:2:", "parallelism.fsdp_reshard_after_forward", "default, always, never"});
}

TEST(TrainConfig, OutOfRangeValueNamesKey) {
  expect_config_error([] { parse_train_config("[training]\nsteps = 0\n", "job.toml"); },
                      {"job.toml:2:", "training.steps", "must be positive"});
  expect_config_error([] { parse_train_config("[lr_scheduler]\ndecay_ratio = 1.5\n", "job.toml"); },
                      {"job.toml:2:", "lr_scheduler.decay_ratio", "[0, 1]"});
}

TEST(TrainConfig, ActivationCheckpointModesTakeEffect) {
  const TrainConfig selective =
      parse_train_config("[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n", "job.toml");
  EXPECT_EQ(selective.activation_checkpoint.mode, spec::ActivationCheckpointing::kSelective);
  EXPECT_EQ(selective.activation_checkpoint.selective_ac_every, 0);  // "op"
  const TrainConfig by_default = parse_train_config("", "job.toml");
  EXPECT_EQ(by_default.activation_checkpoint.mode,
            spec::ActivationCheckpointing::kNone);  // ours; TorchTitan's is selective
  EXPECT_EQ(by_default.activation_checkpoint.selective_ac_every, 2);
  EXPECT_TRUE(by_default.no_effect_keys.empty());
  expect_config_error([] { parse_train_config("[activation_checkpoint]\nmode = \"memory_budget\"\n", "job.toml"); },
                      {"job.toml:2:", "activation_checkpoint.mode", "'memory_budget'", "torch.compile"});
  expect_config_error([] { parse_train_config("[activation_checkpoint]\nmode = \"fancy\"\n", "job.toml"); },
                      {"activation_checkpoint.mode", "'fancy' is not a mode"});
  for (const char* bad : {"0", "-2", "x", ""}) {
    expect_config_error(
        [&] {
          parse_train_config(std::string("[activation_checkpoint]\nselective_ac_option = \"") + bad + "\"\n",
                             "job.toml");
        },
        {"job.toml:2:", "activation_checkpoint.selective_ac_option", "positive layer interval"});
  }
}

TEST(TrainConfig, MalformedTomlNamesLineAndColumn) {
  expect_config_error([] { parse_train_config("[training]\nsteps = = 3\n", "job.toml"); }, {"job.toml:2:"});
}

TEST(TrainConfig, MissingFileNamesPath) {
  expect_config_error([] { load_train_config_file("/nonexistent/job.toml"); }, {"/nonexistent/job.toml"});
}

// A directory opens as a stream and used to read as an empty file: a default job ran with exit 0.
TEST(TrainConfig, DirectoryAsConfigIsRefused) {
  const std::string dir = ::testing::TempDir();
  expect_config_error([&] { load_train_config_file(dir); }, {dir, "is a directory", "--config"});
}

// Sizes whose memory would exceed the machine are refused after validate(), before anything is allocated,
// naming the key and the bytes (they used to end in a bare std::bad_alloc).
TEST(TrainConfig, AbsurdSizesAreRefusedNamingTheKeyAndBytes) {
  auto validated = [](const char* flag, const char* value) {
    TrainConfig c;
    c.model.flavor = "debugmodel_byte";  // a vocabulary of 256, so seq_len's term is the largest
    apply_override(c, flag, value);
    c.validate(1);
    c.check_fits_machine_memory();
  };
  expect_config_error([&] { validated("training.seq_len", "1000000000"); },
                      {"training.seq_len = 1000000000", "bytes per rank", "bytes of memory"});
  expect_config_error([&] { validated("model.dim", "1048576"); }, {"model.dim = 1048576", "bytes"});
  expect_config_error([&] { validated("model.vocab_size", "1099511627776"); },
                      {"model.vocab_size = 1099511627776", "bytes"});
  TrainConfig fits;
  fits.validate(1);
  EXPECT_NO_THROW(fits.check_fits_machine_memory());  // the default debug model fits
}

// The fit is the planner's estimate (sharding/planner.h): sizes past int64 (a dim of 2^40: 2^80 weights),
// past what the spec builds (2^31 - 1 blocks) or counted (a vocabulary of 2^62) are refused as cleanly as
// a model too big for the host, each naming its key; an int64 that holds the peak gives the planner's
// bytes.
TEST(TrainConfig, SizesPastInt64AreRefusedNamingTheKey) {
  auto refused = [](const char* flag, const char* value) {
    TrainConfig c;
    c.model.flavor = "debugmodel_byte";
    apply_override(c, flag, value);
    c.validate(1);
  };
  expect_config_error(
      [&] { refused("model.dim", "1099511627776"); },
      {"model.dim = 1099511627776 with model.n_layers = 4", "bytes per rank", "overflows int64", "bytes of memory"});
  expect_config_error([&] { refused("model.n_layers", "2147483647"); },
                      {"model.n_layers = 2147483647", "more than 65536 blocks", "bytes of memory"});
  expect_config_error([&] { refused("model.vocab_size", "4611686018427387904"); },
                      {"model.vocab_size = 4611686018427387904", "bytes per rank", "bytes of memory"});
  expect_config_error([&] { refused("training.seq_len", "4611686018427387904"); },
                      {"training.seq_len = 4611686018427387904", "bytes per rank", "overflows int64"});
  expect_config_error([&] { refused("training.seq_len", "1000000000"); },
                      {"training.seq_len = 1000000000", "needs at least 8e+18 bytes per rank (the planner's peak"});
}

// Everything a file points at and the memory fit, in one pass before anything starts: one error lists
// every bad path and the too-big model, each with its key and the file's line (they used to come one
// per run: the data set, then the tokenizer, then the memory). resolve_keys(), what --print-config
// runs, looks at none of them.
TEST(TrainConfig, EveryPathAndTheMemoryFitInOneError) {
  const std::string file = ::testing::TempDir() + "/config_test_a_file";
  std::ofstream(file) << "x";
  const std::string toml =
      "[model]\n"                                 // 1
      "flavor = '405B'\n"                         // 2
      "hf_assets_path = '/nonexistent/assets'\n"  // 3
      "[training]\n"                              // 4
      "dataset = 'c4_test'\n"                     // 5
      "dataset_path = '/nonexistent/c4_test'\n"   // 6
      "[checkpoint]\n"                            // 7
      "enable = true\n"                           // 8
      "folder = '" +
      file +
      "/checkpoint'\n"                                // 9
      "initial_load_path = '/nonexistent/step-10'\n"  // 10
      "[metrics]\n"                                   // 11
      "trace_file = '" +
      file +
      "/trace.json'\n"  // 12
      "file = '" +
      file +
      "'\n"                                    // 13: a file, so writable
      "[parallelism]\n"                        // 14
      "plan_file = '/nonexistent/plan.pb'\n";  // 15
  TrainConfig c = parse_train_config(toml, "job.toml");
  TrainConfig printed = c;
  EXPECT_NO_THROW(printed.resolve_keys(1));
  expect_config_error(
      [&] { c.validate(1); },
      {"7 errors:", "job.toml:6: training.dataset = 'c4_test' reads '/nonexistent/c4_test'",
       "job.toml:3: model.hf_assets_path = '/nonexistent/assets'",
       "job.toml:9: checkpoint.folder = '" + file + "/checkpoint'", "'" + file + "' is not a directory",
       "job.toml:10: checkpoint.initial_load_path = '/nonexistent/step-10' does not exist",
       "job.toml:12: metrics.trace_file = '" + file + "/trace.json' cannot be created",
       "job.toml:15: parallelism.plan_file = '/nonexistent/plan.pb' does not exist",
       "job.toml:2: model.dim = 16384 with model.n_layers = 126 (model.flavor = '405B') needs at least"});
  // A flag's key has no line; the fit names the key given first.
  TrainConfig flagged = parse_train_config("[training]\nlocal_batch_size = 4\n", "job.toml");
  apply_override(flagged, "training.seq_len", "1000000000");
  apply_override(flagged, "model.flavor", "debugmodel_byte");
  expect_config_error([&] { flagged.validate(1); }, {"training.seq_len = 1000000000 with"});
  try {
    flagged.validate(1);
  } catch (const ConfigError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("training.seq_len = ")) << e.what();
  }
  // A model key that breaks the dimensions breaks the fit too: said once.
  TrainConfig reshaped;
  apply_override(reshaped, "model.flavor", "8B");
  apply_override(reshaped, "model.dim", "1024");
  try {
    reshaped.validate(1);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("model.dim = 1024 overrides flavor '8B'")) << e.what();
  }
}

TEST(TrainConfig, OverridesInBothFormsAfterTheFile) {
  const CommandLine cl = command_line({"--config", FSDP_DEBUG_MODEL_CONFIG, "--training.steps", "7",
                                       "--optimizer.lr=0.01", "--parallelism.fsdp_reshard_after_forward", "never",
                                       "--checkpoint.enable_checkpoint", "--training.dataset=synthetic",
                                       "--model.n_layers", "2", "--training.global_batch_size", "-1"});
  ASSERT_TRUE(cl.config_file.has_value());
  EXPECT_FALSE(cl.help);
  TrainConfig c = load_train_config(cl);
  EXPECT_EQ(c.training.steps, 7);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_EQ(c.parallelism.fsdp_reshard_after_forward.mode, spec::Reshard::Mode::kNever);
  EXPECT_TRUE(c.checkpoint.enable_checkpoint);
  EXPECT_EQ(c.training.dataset, "synthetic");
  EXPECT_EQ(c.model_spec().dims.layers, 2);
  EXPECT_EQ(c.training.local_batch_size, 4);  // from the file

  TrainConfig g;
  apply_override(g, "--parallelism.fsdp_reshard_after_forward", "4");
  EXPECT_EQ(g.parallelism.fsdp_reshard_after_forward.mode, spec::Reshard::Mode::kGroup);
  EXPECT_EQ(g.parallelism.fsdp_reshard_after_forward.group, 4);
  apply_override(g, "lr_scheduler.decay_ratio", "0.5");
  EXPECT_EQ(g.lr_scheduler.decay_ratio, 0.5);
}

TEST(TrainConfig, HelpAndJobConfigFileAlias) {
  const CommandLine cl = command_line({"--job.config_file=a.toml", "-h"});
  EXPECT_TRUE(cl.help);
  EXPECT_EQ(cl.config_file, "a.toml");
}

TEST(TrainConfig, BadOverrideFlagsNameTheFlag) {
  expect_config_error([] { command_line({"--training.stepz", "3"}); }, {"unknown option '--training.stepz'"});
  expect_config_error([] { command_line({"--training.steps"}); }, {"'--training.steps' needs a value"});
  expect_config_error([] { command_line({"steps=3"}); }, {"unexpected argument 'steps=3'"});
  expect_config_error([] { load_train_config(command_line({"--training.steps", "many"})); },
                      {"--training.steps", "expected an integer, got 'many'"});
  expect_config_error([] { load_train_config(command_line({"--optimizer.lr=1e-3x"})); },
                      {"--optimizer.lr", "expected a number"});
  expect_config_error([] { load_train_config(command_line({"--optimizer.name", "Lion"})); },
                      {"--optimizer.name", "'Lion' is not one of AdamW, SGD"});
  expect_config_error([] { load_train_config(command_line({"--training.deterministic=maybe"})); },
                      {"--training.deterministic", "expected true or false"});
  expect_config_error([] { load_train_config(command_line({"--training.steps=-3"})); },
                      {"--training.steps", "must be positive"});
}

TEST(TrainConfig, ValidateResolvesDegreesAndBatch) {
  TrainConfig c;
  c.training.local_batch_size = 4;
  c.parallelism.data_parallel_replicate_degree = 2;
  c.validate(6);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, 3);
  EXPECT_EQ(c.parallelism.dp_degree(), 6);
  EXPECT_EQ(c.training.global_batch_size, 24);

  TrainConfig r;
  r.parallelism.data_parallel_replicate_degree = -1;
  r.parallelism.data_parallel_shard_degree = 2;
  r.validate(8);
  EXPECT_EQ(r.parallelism.data_parallel_replicate_degree, 4);

  TrainConfig g;
  g.training.local_batch_size = 2;
  g.training.global_batch_size = 16;
  g.validate(4);
  EXPECT_EQ(g.training.gradient_accumulation_steps, 2);
  EXPECT_EQ(g.tokens_per_step_per_rank(), 2 * 2048 * 2);
}

TEST(TrainConfig, ValidateErrorsNameTheKeys) {
  auto with = [](auto edit) {
    TrainConfig c;
    edit(c);
    return c;
  };
  expect_config_error(
      [&] {
        with([](TrainConfig& c) {
          c.parallelism.data_parallel_replicate_degree = 2;
          c.parallelism.data_parallel_shard_degree = 3;
        }).validate(4);
      },
      {"data_parallel_replicate_degree (2)", "data_parallel_shard_degree (3)", "world size is 4"});
  expect_config_error(
      [&] { with([](TrainConfig& c) { c.parallelism.data_parallel_replicate_degree = 3; }).validate(4); },
      {"world size 4 is not divisible", "data_parallel_replicate_degree = 3"});
  expect_config_error(
      [&] {
        with([](TrainConfig& c) {
          c.training.local_batch_size = 4;
          c.training.global_batch_size = 10;
        }).validate(2);
      },
      {"training.global_batch_size = 10", "not a multiple"});
  expect_config_error(
      [&] {
        with([](TrainConfig& c) {
          c.training.local_batch_size = 1;
          c.training.global_batch_size = 8;
          c.training.gradient_accumulation_steps = 2;
        }).validate(2);
      },
      {"training.gradient_accumulation_steps = 2", "implies 4"});
  expect_config_error(
      [&] { with([](TrainConfig& c) { apply_override(c, "parallelism.fsdp_reshard_after_forward", "3"); }).validate(4); },
      {"fsdp_reshard_after_forward = 3", "must divide"});
  expect_config_error([&] { with([](TrainConfig& c) { c.model.n_heads = 5; }).validate(1); },
                      {"model.n_heads = 5", "model.dim = 256"});
  expect_config_error([&] { with([](TrainConfig& c) { c.model.vocab_size = 100; }).validate(1); },
                      {"model.vocab_size must be >= 256"});
  expect_config_error(
      [&] {
        with([](TrainConfig& c) {
          c.parallelism.data_parallel_replicate_degree = -1;
          c.parallelism.data_parallel_shard_degree = -1;
        }).validate(4);
      },
      {"both -1"});
}

TEST(TrainConfig, PresetFlavorsAndOverrides) {
  TrainConfig c;
  c.model.flavor = "8B";
  const spec::ModelSpec preset = spec::model_preset("llama3-8b");
  spec::ModelSpec m = c.model_spec();
  EXPECT_EQ(m.name, "llama3-8b");
  EXPECT_EQ(m.dims.ffn_hidden, preset.dims.ffn_hidden);
  EXPECT_EQ(m.num_params(), preset.num_params());

  c.model.n_layers = 2;
  m = c.model_spec();
  EXPECT_EQ(m.dims.layers, 2);
  EXPECT_EQ(m.dims.ffn_hidden, preset.dims.ffn_hidden);

  c.model.dim = 1024;
  expect_config_error([&] { c.model_spec(); }, {"model.dim = 1024", "model.multiple_of"});
  c.model.multiple_of = 256;
  EXPECT_EQ(c.model_spec().dims.ffn_hidden, spec::llama_ffn_hidden(1024, 256, 0));
}

TEST(TrainConfig, MoeFlavorKeepsExpertsWidthsAndRouting) {
  TrainConfig c;
  c.model.flavor = "debugmodel_byte_moe";
  c.validate(2);
  const spec::ModelSpec preset = spec::model_preset("debugmodel_byte_moe");
  const spec::ModelSpec m = c.model_spec();
  EXPECT_EQ(m.num_params(), preset.num_params());
  EXPECT_EQ(m.dims.moe.num_experts, 8);
  EXPECT_EQ(m.dims.moe.expert_hidden, 128);
  EXPECT_EQ(m.dims.moe.num_shared_experts, 1);
  EXPECT_EQ(m.dims.moe.aux_loss_coeff, preset.dims.moe.aux_loss_coeff);
  EXPECT_TRUE(m.dims.moe.route_norm);
  c.model.flavor = "mixtral-8x7b";  // Mixtral's expert width is its FFN width, rebuilt from multiple_of
  EXPECT_EQ(c.model_spec().num_params(), spec::model_preset("mixtral-8x7b").num_params());
}

TEST(TrainConfig, ToTomlParsesBackEqual) {
  TrainConfig c = load_train_config_file(FSDP_DEBUG_MODEL_CONFIG);
  apply_override(c, "model.dim", "64");
  apply_override(c, "parallelism.fsdp_reshard_after_forward", "2");
  apply_override(c, "job.description", "quote \" and backslash \\");
  const std::string text = c.to_toml();
  const TrainConfig back = parse_train_config(text, "resolved.toml");
  EXPECT_EQ(back.to_toml(), text);
  EXPECT_EQ(back.model.dim, 64);
  EXPECT_EQ(back.job.description, "quote \" and backslash \\");
  EXPECT_EQ(parse_train_config(TrainConfig().to_toml(), "d.toml").to_toml(), TrainConfig().to_toml());
}

TEST(TrainConfig, UsageListsEveryKeyWithDefault) {
  const std::string usage = train_config_usage("fsdp-train");
  for (const auto& k : train_config_keys()) {
    EXPECT_NE(usage.find(k.section + "." + k.key), std::string::npos) << k.key;
  }
  EXPECT_NE(usage.find("training.steps int  [10000]"), std::string::npos);
  EXPECT_NE(usage.find("optimizer.name AdamW|SGD  [\"AdamW\"]"), std::string::npos);
  EXPECT_NE(usage.find("--config FILE"), std::string::npos);
  EXPECT_GE(train_config_keys().size(), 45u);
}

TEST(TrainConfig, LrScheduleCarriesTheSchedulerKeys) {
  TrainConfig c = load_train_config_file(FSDP_DEBUG_MODEL_CONFIG);
  runtime::LrSchedule s = c.lr_schedule();
  EXPECT_DOUBLE_EQ(s.lr, 8e-4);
  EXPECT_EQ(s.total_steps, 20);
  EXPECT_EQ(s.warmup_steps, 2);
  EXPECT_EQ(s.decay_steps, -1);  // unset: every step after warm-up decays
  EXPECT_EQ(s.decay, runtime::DecayType::kLinear);
  EXPECT_DOUBLE_EQ(s.at(1), 4e-4);  // as the job file's comment says: lr/2, then lr
  EXPECT_DOUBLE_EQ(s.at(2), 8e-4);
  EXPECT_GT(s.at(3), s.at(20));

  // TorchTitan's decay_ratio is a fraction of all steps: 0.5 of 20 = 10 decay steps.
  apply_override(c, "lr_scheduler.decay_ratio", "0.5");
  apply_override(c, "lr_scheduler.decay_type", "cosine");
  s = c.lr_schedule();
  EXPECT_EQ(s.decay_steps, 10);
  EXPECT_EQ(s.decay, runtime::DecayType::kCosine);
  EXPECT_DOUBLE_EQ(s.at(11), 8e-4);  // still flat: steps 3..11
  EXPECT_LT(s.at(12), 8e-4);         // decaying
  apply_override(c, "lr_scheduler.decay_ratio", "0.025");  // 0.5 steps: Python's round gives 0
  EXPECT_EQ(c.lr_schedule().decay_steps, 0);
  apply_override(c, "lr_scheduler.decay_ratio", "0.075");  // 1.5 steps: 2
  EXPECT_EQ(c.lr_schedule().decay_steps, 2);
  apply_override(c, "lr_scheduler.total_steps", "40");
  EXPECT_EQ(c.lr_schedule().total_steps, 40);
  EXPECT_EQ(c.lr_schedule().decay_steps, 3);  // round(40 x 0.075)
}

}  // namespace
}  // namespace fsdp::train
