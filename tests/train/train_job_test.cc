// The whole fsdp-train job on in-process ranks: checkpoint resume at other world sizes (issue: a run
// saved at N = 4 continues at M = 2, 3, 4 with the uninterrupted run's losses), restart in place,
// refusal to overwrite a committed step, non-finite losses, and the merged trace and metrics files.
#include "train/train_job.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "common/host_memory.h"
#include "common/json.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/inspect.h"
#include "runtime/checkpoint/safetensors.h"
#include "sharding/chip_profile.h"
#include "tests/collectives/test_support.h"
#include "tests/train/tokenizer_fixture.h"
#include "train/dataset.h"
#include "train/job_recovery.h"

namespace fsdp::train {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kGlobalBatch = 12;  // sequences per step, divisible by 1..4

// A tiny Llama on the bundled corpus, 20 steps, a checkpoint every 10; `extra` is appended TOML (new
// sections only: callers change listed keys with apply_override).
TrainConfig job_config(const fs::path& dump, int world, const std::string& extra = "") {
  std::ostringstream toml;
  // FSDP_EQUIVALENCE=full (`make equivalence`): the debug model itself at sequence length 128.
  const char* mode = std::getenv("FSDP_EQUIVALENCE");
  const bool full = mode != nullptr && std::string(mode) == "full";
  toml << "[job]\ndump_folder = '" << dump.string() << "'\n"
       << "[model]\nflavor = 'debugmodel_byte'\n"
       << (full ? "" : "dim = 32\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\nvocab_size = 256\n")
       << "[training]\nseq_len = " << (full ? 128 : 16) << "\nsteps = 20\nlocal_batch_size = " << kGlobalBatch / world
       << "\n"
       << "global_batch_size = " << kGlobalBatch << "\nseed = 5\nmixed_precision_param = 'float32'\n"
       << "deterministic = true\n"
       << "[optimizer]\nlr = 3e-3\n"
       << "[lr_scheduler]\nwarmup_steps = 2\n"
       << "[checkpoint]\nenable_checkpoint = true\ninterval = 10\nkeep_latest_k = 0\n"
       << "[metrics]\nlog_freq = 100\nfile = 'metrics.jsonl'\n"
       << extra;
  return parse_train_config(toml.str(), "job_test.toml");
}

// Rank 0's result (losses are global; parameters, when gathered, are the full model on every rank).
JobResult run_job(int world, TrainConfig config, JobOptions options = {}) {
  config.validate(world);
  JobResult out;
  std::mutex mu;
  testing::InProcJob job(world);
  job.run([&](Communicator& comm) {
    JobResult r = run_training_job(config, comm, options);
    if (comm.rank() == 0) {
      std::lock_guard lock(mu);
      out = std::move(r);
    }
  });
  return out;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(n, 1e-30));
}

class TrainJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fsdp_train_job_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Saved at N = 4 at step 10, resumed at M = 2, 3, 4 from that checkpoint (in a folder of their own):
// steps 11..20 match the uninterrupted run within 1e-5, bitwise at M = N.
TEST_F(TrainJobTest, ResumeAtAnyWorldSizeMatchesTheUninterruptedRun) {
  JobOptions gather;
  gather.gather_final_parameters = true;
  const JobResult full = run_job(4, job_config(dir_ / "n4", 4), gather);
  ASSERT_EQ(full.steps.size(), 20u);
  const std::string saved = (dir_ / "n4" / "checkpoint").string();
  ASSERT_TRUE(fs::exists(fs::path(saved) / "step-10" / "metadata.pb"));

  for (int m : {2, 3, 4}) {
    SCOPED_TRACE("M = " + std::to_string(m));
    TrainConfig c = job_config(dir_ / ("m" + std::to_string(m)), m);
    apply_override(c, "checkpoint.initial_load_path", saved);
    apply_override(c, "checkpoint.initial_load_model_only", "false");  // the whole training state
    apply_override(c, "checkpoint.load_step", "10");
    const JobResult resumed = run_job(m, c, gather);
    ASSERT_EQ(resumed.start_step, 10);
    ASSERT_EQ(resumed.steps.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      const double want = full.steps[10 + i].loss, got = resumed.steps[i].loss;
      EXPECT_EQ(resumed.steps[i].step, static_cast<int64_t>(11 + i));
      if (m == 4) {
        EXPECT_EQ(got, want) << "step " << 11 + i << " must be bitwise equal at M = N";
      } else {
        EXPECT_LT(rel(got, want), 1e-5) << "step " << 11 + i << ": " << got << " vs " << want;
      }
    }
    ASSERT_EQ(resumed.final_parameters.size(), full.final_parameters.size());
    for (size_t u = 0; u < full.final_parameters.size(); ++u) {
      if (m == 4) {
        EXPECT_EQ(resumed.final_parameters[u], full.final_parameters[u]) << "unit " << u;
      } else {
        EXPECT_LT(rel_l2(resumed.final_parameters[u], full.final_parameters[u]), 1e-5) << "unit " << u;
      }
    }
  }
}

// Expert parallelism: checkpoints name every expert's tensors whatever rank held them, so a run saved
// at EP 2 resumes at EP 1 and EP 2, and one saved at EP 1 resumes at EP 2 (N = 2, the MoE flavor shrunk
// like the dense model above): steps 11..20 match the uninterrupted run within 1e-5, bitwise at the
// saving degree.
TEST_F(TrainJobTest, ExpertParallelCheckpointsReshardAcrossDegrees) {
  const auto moe_config = [&](const std::string& name, int64_t ep) {
    TrainConfig c = job_config(dir_ / name, 2);
    apply_override(c, "model.flavor", "debugmodel_byte_moe");
    apply_override(c, "model.multiple_of", "16");  // defines the (unused) dense FFN width at the small dim
    apply_override(c, "parallelism.expert_parallel_degree", std::to_string(ep));
    return c;
  };
  for (int64_t saved_ep : {2, 1}) {
    const std::string name = "ep" + std::to_string(saved_ep);
    const JobResult full = run_job(2, moe_config(name, saved_ep));
    ASSERT_EQ(full.steps.size(), 20u);
    const std::string saved = (dir_ / name / "checkpoint").string();
    for (int64_t ep : {1, 2}) {
      if (ep == saved_ep && saved_ep == 1) continue;  // the dense-layout resume is tested above
      SCOPED_TRACE("saved at EP " + std::to_string(saved_ep) + ", resumed at EP " + std::to_string(ep));
      TrainConfig c = moe_config(name + "_to_ep" + std::to_string(ep), ep);
      apply_override(c, "checkpoint.initial_load_path", saved);
      apply_override(c, "checkpoint.initial_load_model_only", "false");
      apply_override(c, "checkpoint.load_step", "10");
      const JobResult resumed = run_job(2, c);
      ASSERT_EQ(resumed.start_step, 10);
      ASSERT_EQ(resumed.steps.size(), 10u);
      for (size_t i = 0; i < 10; ++i) {
        const double want = full.steps[10 + i].loss, got = resumed.steps[i].loss;
        if (ep == saved_ep) {
          EXPECT_EQ(got, want) << "step " << 11 + i << " must be bitwise equal at the saving degree";
        } else {
          EXPECT_LT(rel(got, want), 1e-5) << "step " << 11 + i << ": " << got << " vs " << want;
        }
      }
    }
  }
}

// training.param_comm_dtype / grad_comm_dtype = mxfp8: the run stays within 2% of the bf16-communication
// run's loss at every step, and a resume from its step-10 checkpoint is bitwise the uninterrupted run
// (checkpoints hold the f32 master weights; the wire encoding is rebuilt from them).
TEST_F(TrainJobTest, Mxfp8CommunicationTracksBf16AndResumesExactly) {
  auto config = [&](const std::string& folder, bool mxfp8) {
    TrainConfig c = job_config(dir_ / folder, 2);
    apply_override(c, "training.mixed_precision_param", "bfloat16");
    if (mxfp8) {
      apply_override(c, "training.param_comm_dtype", "mxfp8");
      apply_override(c, "training.grad_comm_dtype", "mxfp8");
    }
    return c;
  };
  JobOptions gather;
  gather.gather_final_parameters = true;
  const JobResult bf16 = run_job(2, config("bf16", false));
  const JobResult full = run_job(2, config("mxfp8", true), gather);
  ASSERT_EQ(full.steps.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_LT(rel(full.steps[i].loss, bf16.steps[i].loss), 2e-2)
        << "step " << i + 1 << ": " << full.steps[i].loss << " vs bf16 " << bf16.steps[i].loss;
  }
  EXPECT_NE(full.steps.back().loss, bf16.steps.back().loss) << "mxfp8 took no effect";

  TrainConfig c = config("resumed", true);
  apply_override(c, "checkpoint.initial_load_path", (dir_ / "mxfp8" / "checkpoint").string());
  apply_override(c, "checkpoint.initial_load_model_only", "false");
  apply_override(c, "checkpoint.load_step", "10");
  const JobResult resumed = run_job(2, c, gather);
  ASSERT_EQ(resumed.steps.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed.steps[i].loss, full.steps[10 + i].loss) << "step " << 11 + i;
  EXPECT_EQ(resumed.final_parameters, full.final_parameters);
}

// TorchTitan's c4_test name over a local JSONL folder and a tokenizer.json folder: saved at N = 2 at step
// 10, resumed at M = 1 and 3 (global batch 12 either way), steps 11..20 continue the packed stream exactly:
// the uninterrupted run's losses within 1e-5, bitwise at M = N.
TEST_F(TrainJobTest, JsonlDatasetResumesExactlyAtAnotherWorldSize) {
  test_files::write_byte_level_tokenizer(dir_ / "tokenizer", {{"t", "h"}, {"th", "e"}, {"i", "n"}});
  fs::create_directories(dir_ / "c4_local");
  {
    std::ofstream jsonl(dir_ / "c4_local" / "c4-sample.jsonl");
    std::istringstream corpus{std::string(tiny_corpus())};
    std::string line;
    while (std::getline(corpus, line)) jsonl << "{\"text\": " << json::quote(line) << ", \"url\": \"x\"}\n";
  }
  const auto config = [&](const std::string& folder, int world) {
    TrainConfig c = job_config(dir_ / folder, world);
    apply_override(c, "training.dataset", "c4_test");
    apply_override(c, "training.dataset_path", (dir_ / "c4_local").string());
    apply_override(c, "model.hf_assets_path", (dir_ / "tokenizer").string());
    apply_override(c, "model.vocab_size", "264");  // the tokenizer's 256 bytes + 3 merges + BOS + EOS = 261
    return c;
  };
  const JobResult full = run_job(2, config("n2", 2));
  ASSERT_EQ(full.steps.size(), 20u);
  EXPECT_LT(full.steps.back().loss, full.steps.front().loss);
  for (int m : {1, 2, 3}) {
    SCOPED_TRACE("M = " + std::to_string(m));
    TrainConfig c = config("m" + std::to_string(m), m);
    apply_override(c, "checkpoint.initial_load_path", (dir_ / "n2" / "checkpoint").string());
    apply_override(c, "checkpoint.initial_load_model_only", "false");  // the whole training state
    apply_override(c, "checkpoint.load_step", "10");
    const JobResult resumed = run_job(m, c);
    ASSERT_EQ(resumed.steps.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      const double want = full.steps[10 + i].loss, got = resumed.steps[i].loss;
      if (m == 2) {
        EXPECT_EQ(got, want) << "step " << 11 + i;
      } else {
        EXPECT_LT(rel(got, want), 1e-5) << "step " << 11 + i << ": " << got << " vs " << want;
      }
    }
  }
  // Resumed over other documents: allowed, with a warning that the position means other tokens.
  fs::create_directories(dir_ / "other_data");
  std::ofstream(dir_ / "other_data" / "one.jsonl") << "{\"text\": \"another data set\"}\n";
  TrainConfig other = config("other", 1);
  apply_override(other, "training.dataset_path", (dir_ / "other_data").string());
  apply_override(other, "checkpoint.initial_load_path", (dir_ / "n2" / "checkpoint").string());
  apply_override(other, "checkpoint.initial_load_model_only", "false");
  apply_override(other, "checkpoint.load_step", "10");
  std::ostringstream log;
  JobOptions logged;
  logged.log = &log;
  run_job(1, other, logged);
  EXPECT_NE(log.str().find("was saved reading 'c4_test documents="), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("this run reads 'c4_test documents=1 "), std::string::npos) << log.str();

  // A model vocabulary smaller than the tokenizer's is refused naming both.
  TrainConfig small = config("small", 1);
  apply_override(small, "model.vocab_size", "200");
  try {
    small.validate(1);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab_size = 200 is smaller than the tokenizer's 261 ids"),
              std::string::npos) << e.what();
  }
}

// A job stopped after its step-10 save and started again with the same configuration resumes there.
TEST_F(TrainJobTest, RestartInTheSameFolderResumesFromTheLatestSave) {
  const JobResult full = run_job(2, job_config(dir_ / "full", 2));
  JobOptions crash;
  crash.stop_after_step = 12;  // saved at 10, then "crashed" during step 13
  const JobResult first = run_job(2, job_config(dir_ / "restart", 2), crash);
  ASSERT_EQ(first.steps.size(), 12u);
  const JobResult second = run_job(2, job_config(dir_ / "restart", 2));
  ASSERT_EQ(second.start_step, 10);
  ASSERT_EQ(second.steps.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(second.steps[i].loss, full.steps[10 + i].loss) << i;
}

// Resuming an older step into a folder that already holds later ones would overwrite committed data:
// refused before any training, naming the step and the way out.
TEST_F(TrainJobTest, RefusesToOverwriteALaterCommittedCheckpoint) {
  run_job(2, job_config(dir_ / "a", 2));
  TrainConfig c = job_config(dir_ / "a", 2);
  apply_override(c, "checkpoint.load_step", "10");
  try {
    run_job(2, c);
    FAIL() << "expected CheckpointError";
  } catch (const runtime::checkpoint::CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("step-20"), std::string::npos) << what;
    EXPECT_NE(what.find("initial_load_path"), std::string::npos) << what;
    EXPECT_NE(what.find("initial_load_model_only = false"), std::string::npos) << what;
  }
  EXPECT_TRUE(fs::exists(dir_ / "a" / "checkpoint" / "step-20" / "metadata.pb"));
}

// A learning rate that blows the parameters up: the job stops with a message that names the step and
// the way out, or (skip_nonfinite_steps) skips those steps and finishes.
// Checkpoint paths are checked at start-up, before any training, naming the key: a folder that is a
// file (which used to fail at the first save), an initial_load_path that is missing or a file asked
// for a whole training state, initial_load_in_hf without a .safetensors, last_save_in_hf of a full save.
TEST_F(TrainJobTest, BadCheckpointPathsAreRefusedAtStartNamingTheKey) {
  auto expect_refused = [&](TrainConfig c, const std::vector<std::string>& parts) {
    try {
      run_job(1, std::move(c));
      ADD_FAILURE() << "expected ConfigError containing '" << parts.front() << "'";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  };
  fs::create_directories(dir_);
  const fs::path file = dir_ / "a_file";
  std::ofstream(file) << "x";

  TrainConfig folder_is_file = job_config(dir_ / "job1", 1);
  apply_override(folder_is_file, "checkpoint.folder", file.string());
  expect_refused(folder_is_file, {"checkpoint.folder", "is not a directory"});

  TrainConfig initial_is_file = job_config(dir_ / "job2", 1);
  apply_override(initial_is_file, "checkpoint.initial_load_path", file.string());
  apply_override(initial_is_file, "checkpoint.initial_load_model_only", "false");
  expect_refused(initial_is_file, {"checkpoint.initial_load_path", "weights only", "initial_load_model_only = false"});

  TrainConfig hf_without_file = job_config(dir_ / "job4", 1);
  apply_override(hf_without_file, "checkpoint.initial_load_path", dir_.string());
  apply_override(hf_without_file, "checkpoint.initial_load_in_hf", "true");
  expect_refused(hf_without_file, {"checkpoint.initial_load_in_hf", "holds no .safetensors file"});

  TrainConfig hf_full_save = job_config(dir_ / "job5", 1);
  apply_override(hf_full_save, "checkpoint.last_save_in_hf", "true");
  apply_override(hf_full_save, "checkpoint.last_save_model_only", "false");
  expect_refused(hf_full_save, {"checkpoint.last_save_in_hf", "last_save_model_only"});

  TrainConfig initial_missing = job_config(dir_ / "job3", 1);
  apply_override(initial_missing, "checkpoint.initial_load_path", (dir_ / "nowhere").string());
  expect_refused(initial_missing, {"checkpoint.initial_load_path", "does not exist"});
  EXPECT_FALSE(fs::exists(dir_ / "job1" / "metrics.jsonl"));  // refused before any step was logged
}

// initial_load_path loads the weights only (TorchTitan's initial_load_model_only): run A trains at
// lr 0, so its checkpoints hold the initial weights with 10 and 20 steps of optimizer state behind
// them. A run starting from any of them (A's full step-10 directory, A's last save as HF-named
// safetensors, the folder holding it, the same split over two files) must reproduce the fresh run:
// same weights, step 0, a fresh optimizer and data position. A's step 10 with
// initial_load_model_only = false resumes at step 10.
TEST_F(TrainJobTest, InitialLoadIsWeightsOnlyAndLastSaveIsModelOnly) {
  JobOptions gather;
  gather.gather_final_parameters = true;
  const JobResult fresh = run_job(2, job_config(dir_ / "fresh", 2), gather);

  TrainConfig a = job_config(dir_ / "a", 2);
  apply_override(a, "optimizer.lr", "0");
  apply_override(a, "checkpoint.last_save_in_hf", "true");
  run_job(2, a);
  const fs::path a_ckpt = dir_ / "a" / "checkpoint";
  ASSERT_TRUE(fs::exists(a_ckpt / "step-10" / "metadata.pb"));
  const fs::path hf_file = a_ckpt / "step-20" / "model.safetensors";
  ASSERT_TRUE(fs::exists(hf_file));
  const auto header = runtime::checkpoint::read_safetensors_header(hf_file.string());
  EXPECT_EQ(header.tensors.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(header.tensors.front().dtype, "F32");

  // The same weights as Hugging Face shards them: two files in a folder.
  namespace ck = runtime::checkpoint;
  ck::SafetensorsFormat hf;
  hf.hf = ck::HfLlamaHeads{4, 2};
  const auto tensors = ck::read_safetensors(hf_file.string(), hf);
  const fs::path sharded = dir_ / "hf_sharded";
  fs::create_directories(sharded);
  ck::write_safetensors((sharded / "model-00001-of-00002.safetensors").string(),
                        {tensors.begin(), tensors.begin() + 5}, {}, hf);
  ck::write_safetensors((sharded / "model-00002-of-00002.safetensors").string(), {tensors.begin() + 5, tensors.end()},
                        {}, hf);

  struct From {
    std::string path;
    bool hf;
  };
  int runs = 0;
  for (const From& from : {From{(a_ckpt / "step-10").string(), false}, From{hf_file.string(), true},
                           From{(a_ckpt / "step-20").string(), true}, From{sharded.string(), true}}) {
    SCOPED_TRACE(from.path);
    TrainConfig b = job_config(dir_ / ("b" + std::to_string(runs++)), 3);
    apply_override(b, "checkpoint.initial_load_path", from.path);
    if (from.hf) apply_override(b, "checkpoint.initial_load_in_hf", "true");
    const JobResult got = run_job(3, b, gather);
    ASSERT_EQ(got.start_step, 0);
    ASSERT_EQ(got.steps.size(), 20u);
    for (size_t i = 0; i < 20; ++i) {
      // 2 ranks against 3: the same sums in another order, so within 1e-5 rather than bitwise.
      EXPECT_LT(rel(got.steps[i].loss, fresh.steps[i].loss), 1e-5) << "step " << i + 1;
      EXPECT_EQ(got.steps[i].lr, fresh.steps[i].lr) << "step " << i + 1;
    }
    for (size_t u = 0; u < fresh.final_parameters.size(); ++u) {
      EXPECT_LT(rel_l2(got.final_parameters[u], fresh.final_parameters[u]), 1e-5) << "unit " << u;
    }
  }
  // At the same world size the weights-only start is bitwise the fresh run.
  TrainConfig same = job_config(dir_ / "same", 2);
  apply_override(same, "checkpoint.initial_load_path", (a_ckpt / "step-10").string());
  const JobResult same_run = run_job(2, same, gather);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(same_run.steps[i].loss, fresh.steps[i].loss) << "step " << i + 1;
  EXPECT_EQ(same_run.final_parameters, fresh.final_parameters);

  // And the weights are really read: from the fresh run's trained (model-only) step 20, step 1's loss
  // is lower than the fresh run's, at the fresh run's step-1 learning rate.
  TrainConfig trained = job_config(dir_ / "trained", 2);
  apply_override(trained, "checkpoint.initial_load_path", (dir_ / "fresh" / "checkpoint" / "step-20").string());
  const JobResult trained_run = run_job(2, trained);
  EXPECT_LT(trained_run.steps[0].loss, fresh.steps[0].loss - 0.1);
  EXPECT_EQ(trained_run.steps[0].lr, fresh.steps[0].lr);

  // The whole training state on request: resumes at step 10.
  TrainConfig whole = job_config(dir_ / "whole", 2);
  apply_override(whole, "checkpoint.initial_load_path", (a_ckpt / "step-10").string());
  apply_override(whole, "checkpoint.initial_load_model_only", "false");
  EXPECT_EQ(run_job(2, whole).start_step, 10);

  // The fresh run's last save (default last_save_model_only) is a step directory of weights only:
  // no optimizer state, no training state; resuming from it is refused naming what it is.
  const auto meta = runtime::checkpoint::read_metadata((dir_ / "fresh" / "checkpoint" / "step-20").string());
  EXPECT_EQ(meta.optimizer(), "");
  EXPECT_EQ(meta.training_state_size(), 0);
  for (const auto& t : meta.tensors()) EXPECT_EQ(t.role(), "param");
  TrainConfig longer = job_config(dir_ / "fresh", 2);
  apply_override(longer, "training.steps", "30");
  try {
    run_job(2, longer);
    ADD_FAILURE() << "resumed from a model-only save";
  } catch (const runtime::checkpoint::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("model-only"), std::string::npos) << e.what();
  }

  // export_dtype = bfloat16: the last save is step-<N>/model.safetensors in BF16, TorchTitan names.
  TrainConfig bf16 = job_config(dir_ / "bf16", 1);
  apply_override(bf16, "training.steps", "2");
  apply_override(bf16, "checkpoint.export_dtype", "bfloat16");
  run_job(1, bf16);
  const auto bf16_header =
      runtime::checkpoint::read_safetensors_header((dir_ / "bf16" / "checkpoint" / "step-2" / "model.safetensors").string());
  EXPECT_EQ(bf16_header.tensors.front().name, "tok_embeddings.weight");
  for (const auto& t : bf16_header.tensors) EXPECT_EQ(t.dtype, "BF16") << t.name;
  try {
    run_job(1, bf16);  // again: would overwrite that file
    ADD_FAILURE() << "overwrote a last save";
  } catch (const runtime::checkpoint::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("step-2/model.safetensors, the last save"), std::string::npos) << e.what();
  }
}

TEST_F(TrainJobTest, NonFiniteLossStopsOrIsSkipped) {
  TrainConfig c = job_config(dir_ / "nan", 2);
  apply_override(c, "optimizer.lr", "1e30");
  apply_override(c, "lr_scheduler.warmup_steps", "0");
  apply_override(c, "checkpoint.enable_checkpoint", "false");
  try {
    run_job(2, c);
    FAIL() << "expected NonFiniteLoss";
  } catch (const NonFiniteLoss& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("not finite"), std::string::npos) << what;
    EXPECT_NE(what.find("skip_nonfinite_steps"), std::string::npos) << what;
  }
  apply_override(c, "training.skip_nonfinite_steps", "true");
  JobOptions gather;
  gather.gather_final_parameters = true;
  const JobResult skipped = run_job(2, c, gather);
  ASSERT_EQ(skipped.steps.size(), 20u);
  int n_skipped = 0;
  for (const auto& s : skipped.steps) n_skipped += s.skipped ? 1 : 0;
  EXPECT_GE(n_skipped, 18);  // the first step may still be finite; every one after the blow-up is skipped
  EXPECT_FALSE(skipped.steps.back().skipped && std::isfinite(skipped.steps.back().loss));
}

// The metric line's memory percentage is of this host's memory (or its cgroup's limit) on the CPU, of the
// chip profile's on a planned accelerator, and the start-up lines say which.
TEST_F(TrainJobTest, MemoryPercentageIsOfThisHostsMemory) {
  const MemoryLimit host = host_memory_limit();
  EXPECT_EQ(job_memory_capacity(sharding::chip_preset("cpu")).bytes, host.bytes);
  const MemoryLimit h100 = job_memory_capacity(sharding::chip_preset("h100"));
  EXPECT_EQ(h100.bytes, static_cast<int64_t>(sharding::chip_preset("h100").memory_bytes));
  EXPECT_EQ(h100.source, "chip profile 'h100'");
  TrainConfig c = job_config(dir_ / "memory", 1);
  apply_override(c, "training.steps", "1");
  apply_override(c, "checkpoint.enable_checkpoint", "false");
  c.validate(1);  // the metrics options carry the plan's peak, which needs the mesh
  EXPECT_EQ(job_metrics_options(c, 0, nullptr).memory_capacity_bytes, static_cast<double>(host.bytes));
  std::ostringstream log;
  JobOptions logged;
  logged.log = &log;
  run_job(1, c, logged);
  EXPECT_NE(log.str().find("memory: percentages are of " + host.describe()), std::string::npos) << log.str();
}

// One merged trace: every rank a process with a compute and a communication track, compute spans
// named by unit; rank 0's metrics file has a record per step.
TEST_F(TrainJobTest, WritesOneMergedTraceAndTheMetricsFile) {
  TrainConfig c = job_config(dir_ / "trace", 3);
  apply_override(c, "metrics.trace_file", "trace.json");
  apply_override(c, "training.steps", "3");
  apply_override(c, "checkpoint.enable_checkpoint", "false");
  run_job(3, c);
  std::ifstream in(dir_ / "trace" / "trace.json");
  ASSERT_TRUE(in) << "no merged trace";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  for (int r = 0; r < 3; ++r) {
    for (int tid = 0; tid < 2; ++tid) {
      const std::string ev = "\"ph\":\"X\",\"pid\":" + std::to_string(r) + ",\"tid\":" + std::to_string(tid);
      EXPECT_NE(text.find(ev), std::string::npos) << "no events for rank " << r << " track " << tid;
    }
  }
  EXPECT_NE(text.find("\"forward layers.1\""), std::string::npos);
  EXPECT_NE(text.find("\"all_gather layers.0\""), std::string::npos);
  std::ifstream metrics(dir_ / "trace" / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) lines += line.empty() ? 0 : 1;
  EXPECT_EQ(lines, 3);
}

// Each save is an event line after its step's record, and the run report beside metrics.jsonl marks it on
// every chart; two ranks communicate, so every series is drawn (train/run_report.h).
TEST_F(TrainJobTest, MarksEachSaveInTheMetricsAndTheReport) {
  TrainConfig c = job_config(dir_ / "report", 2);
  apply_override(c, "training.steps", "4");
  apply_override(c, "checkpoint.interval", "2");
  run_job(2, c);
  std::ifstream metrics(dir_ / "report" / "metrics.jsonl");
  std::vector<std::string> kinds;
  for (std::string line; std::getline(metrics, line);) {
    const json::Value v = json::parse(line);
    kinds.push_back(v.find("event") ? v.at("event").string() + " " + std::to_string(v.at("step").integer())
                                    : "step " + std::to_string(v.at("step").integer()));
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"step 1", "step 2", "checkpoint 2", "step 3", "step 4", "checkpoint 4"}));
  std::ifstream report(dir_ / "report" / "report.html");
  std::stringstream page;
  page << report.rdbuf();
  for (const char* series : {"loss", "grad_norm", "tps", "memory", "planned_memory", "comm_hidden"}) {
    EXPECT_NE(page.str().find("data-series=\"" + std::string(series) + "\""), std::string::npos) << series;
  }
  int marks = 0;
  for (size_t at = page.str().find("data-event=\"checkpoint\""); at != std::string::npos;
       at = page.str().find("data-event=\"checkpoint\"", at + 1)) {
    ++marks;
  }
  EXPECT_EQ(marks, 2 * 5);  // both saves on each of the five charts
}

// TorchTitan's model options reach the trainer: Llama 3.1 RoPE scaling (on by default) and the init scheme.
TEST(TrainJob, RopeScalingAndInitSchemeReachTheTrainer) {
  TrainConfig c;
  c.validate(1);
  TrainerOptions t = trainer_options(c);
  ASSERT_TRUE(t.model.dims.rope_scaling.has_value());
  EXPECT_EQ(t.model.dims.rope_scaling->factor, 8.0);
  EXPECT_EQ(t.model.dims.rope_scaling->low_freq_factor, 1.0);
  EXPECT_EQ(t.model.dims.rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(t.model.dims.rope_scaling->original_context, 8192.0);
  EXPECT_EQ(t.init, model::InitScheme::kTorchTitan);
  apply_override(c, "model.rope_scaling", "false");
  apply_override(c, "model.init_scheme", "normal");
  t = trainer_options(c);
  EXPECT_FALSE(t.model.dims.rope_scaling.has_value());
  EXPECT_EQ(t.init, model::InitScheme::kNormal);
  TrainConfig bad;
  apply_override(bad, "model.rope_high_freq_factor", "1");
  EXPECT_THROW(bad.validate(1), ConfigError);
}

// fault_tolerance on HSDP (docs/fault_tolerance.md#hsdp): no mirror while the replicas hold every shard;
// after a loss the layout spec::mesh_after_loss gives, with the redundancy the config keeps on it.
TEST(TrainJob, FaultToleranceOnHsdpKeepsNoMirrorAndPlansEachEpoch) {
  TrainConfig c;
  apply_override(c, "fault_tolerance.enable", "true");
  apply_override(c, "parallelism.data_parallel_replicate_degree", "3");
  c.validate(6);
  EXPECT_EQ(c.policy().redundancy, spec::Redundancy::kNone);
  EXPECT_EQ(plan_epoch(c, 5).describe(), "FSDP over 5 ranks with the buddy mirror");
  EXPECT_EQ(plan_epoch(c, 5).redundancy, spec::Redundancy::kBuddy);
  EXPECT_EQ(plan_epoch(c, 4).describe(), "HSDP 2 x 2 (the replicas are the redundancy)");
  EXPECT_EQ(plan_epoch(c, 4).redundancy, spec::Redundancy::kNone);
  apply_override(c, "fault_tolerance.redundancy", "none");
  EXPECT_EQ(plan_epoch(c, 5).describe(), "FSDP over 5 ranks without redundancy (the next loss means a restart)");
  EXPECT_EQ(plan_epoch(c, 1).describe(), "FSDP over 1 rank without redundancy (the next loss means a restart)");
}

}  // namespace
}  // namespace fsdp::train
