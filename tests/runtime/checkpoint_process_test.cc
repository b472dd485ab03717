// A rank SIGKILLed in the middle of a save, with real processes over the shared-memory transport: the
// previous checkpoint must stay loadable and the partial one must be ignored (and cleaned up).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "checkpoint_support.h"
#include "collectives/transports/shm.h"
#include "common/knobs.h"
#include "runtime/checkpoint/checkpointer.h"
#include "tests/collectives/test_support.h"

namespace fsdp::runtime::checkpoint {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST(CheckpointProcesses, KillDuringSaveLeavesPreviousStepLoadable) {
  testing::ScratchDir dir;
  CheckpointOptions o;
  o.folder = dir.path();
  const std::string job = testing::unique_job_name("ckpt");
  auto codes = testing::run_processes(2, 60s, [&](int rank) {
    CommOptions co;
    co.timeout = 20s;
    auto world = Communicator::create(make_shm_transport(job, rank, 2, 20s), co);
    testing::ToyJob t(*world);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), *world, o, t.tracker);
    t.step(0);
    ckpt.save(1, "toy", {{"step", "1"}});
    t.step(1);
    // Rank 1 dies right after its shard file of step 2 is on disk, before the commit.
    if (rank == 1) ::setenv(std::string(knobs::kFaultKillAfterCheckpointFiles.env).c_str(), "1", 1);
    try {
      ckpt.save(2, "toy", {{"step", "2"}});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: save of step 2 failed as expected: %s\n", rank, e.what());
      std::_Exit(0);  // the communicator is broken; nothing left to tear down cleanly
    }
    return 3;  // rank 0 must not see the save succeed
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);

  // On disk: step 1 committed, step 2 only as a temporary directory holding rank 1's file.
  EXPECT_EQ(committed_steps(dir.path()), (std::vector<int64_t>{1}));
  EXPECT_FALSE(fs::exists(dir / "step-2"));
  int partial = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) partial += e.path().filename().string().starts_with(".tmp-step-2-");
  EXPECT_LE(partial, 1);  // rank 0 may have removed it already when the failure reached it

  testing::InProcJob jobs(2);
  jobs.run([&](Communicator& c) {
    testing::ToyJob t(c);
    Checkpointer ckpt(*t.fsdp, t.opt.get(), c, o, t.tracker);
    const LoadResult r = ckpt.load("toy");
    EXPECT_EQ(r.step, 1);
    EXPECT_EQ(r.training_state.at("step"), "1");
  });
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp-")) << e.path();
  }
}

}  // namespace
}  // namespace fsdp::runtime::checkpoint
