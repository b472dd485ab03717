// A checkpoint an earlier build wrote (tests/fixtures/format_v2/checkpoint, 2 ranks, a tiny Llama; the
// command is in tests/fixtures/format_v2/README.md) resumes through fsdp-train's own loader: the job
// configured by the same command line, resumed from its step-1 save, runs step 2 with the loss of an
// uninterrupted run of that job (and of the run that wrote it).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "tests/collectives/test_support.h"
#include "train/config.h"
#include "train/train_job.h"

namespace fsdp::train {
namespace {

namespace fs = std::filesystem;

const std::string kSource = FSDP_SOURCE_DIR;
const std::string kCheckpoint = kSource + "/tests/fixtures/format_v2/checkpoint";
constexpr int kWorld = 2;
constexpr double kWrittenStep2Loss = 5.97619;  // what the writing run printed for step 2

// The writing command's flags (README.md), then `extra`.
TrainConfig fixture_job(const fs::path& dump, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"fsdp-train",
                                   "--config",
                                   kSource + "/configs/debug_model.toml",
                                   "--model.dim",
                                   "16",
                                   "--model.n_layers",
                                   "1",
                                   "--model.n_heads",
                                   "2",
                                   "--model.n_kv_heads",
                                   "1",
                                   "--model.multiple_of",
                                   "16",
                                   "--training.steps",
                                   "2",
                                   "--training.local_batch_size",
                                   "2",
                                   "--training.seq_len",
                                   "16",
                                   "--checkpoint.enable",
                                   "true",
                                   "--checkpoint.interval",
                                   "1",
                                   "--checkpoint.keep_latest_k",
                                   "0",
                                   "--metrics.file",
                                   "",
                                   "--job.dump_folder",
                                   dump.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return load_train_config(parse_command_line(static_cast<int>(argv.size()), argv.data()));
}

JobResult run_job(TrainConfig config) {
  config.validate(kWorld);
  JobResult out;
  std::mutex mu;
  testing::InProcJob job(kWorld);
  job.run([&](Communicator& comm) {
    JobResult r = run_training_job(config, comm);
    if (comm.rank() == 0) {
      std::lock_guard lock(mu);
      out = std::move(r);
    }
  });
  return out;
}

TEST(FormatFixture, CheckpointResumesOneStepWithTheUninterruptedLoss) {
  const fs::path dir = fs::temp_directory_path() / ("fsdp_format_fixture_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const JobResult fresh = run_job(fixture_job(dir / "fresh", {}));
  ASSERT_EQ(fresh.steps.size(), 2u);

  const JobResult resumed = run_job(
      fixture_job(dir / "resumed", {"--checkpoint.initial_load_path", kCheckpoint,
                                    "--checkpoint.initial_load_model_only", "false", "--checkpoint.load_step", "1"}));
  fs::remove_all(dir);
  ASSERT_EQ(resumed.start_step, 1);
  ASSERT_EQ(resumed.steps.size(), 1u);
  EXPECT_EQ(resumed.steps[0].step, 2);
  const double got = resumed.steps[0].loss, want = fresh.steps[1].loss;
  EXPECT_LT(std::abs(got - want), 1e-5 * std::abs(want)) << got << " vs " << want;
  EXPECT_LT(std::abs(got - kWrittenStep2Loss), 1e-4) << got;
}

}  // namespace
}  // namespace fsdp::train
