// The in-memory reshard (runtime/live_reshard.h): N ranks train a few steps with buddy mirrors, one (or
// two) of them is lost, and the survivors rebuild the sharded state at the new size from their own
// shards and mirrors: the whole parameters and optimizer state equal those before, bit for bit. Growing
// back, a newcomer that holds nothing receives its part the same way.
#include "runtime/live_reshard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "redundancy_support.h"
#include "tests/collectives/test_support.h"

namespace fsdp::runtime {
namespace {

using testing::InProcJob;
using Whole = std::vector<std::vector<std::vector<float>>>;  // [what][unit][element]

Whole gather_all(FsdpModel& model, ShardedOptimizer& opt) {
  Whole out;
  for (int w = 0; w <= opt.state_count(); ++w) out.push_back(testing::gather_whole(model, opt, w));
  return out;
}

bool bitwise_equal(const Whole& a, const Whole& b) {
  if (a.size() != b.size()) return false;
  for (size_t w = 0; w < a.size(); ++w) {
    if (a[w].size() != b[w].size()) return false;
    for (size_t u = 0; u < a[w].size(); ++u) {
      if (a[w][u].size() != b[w][u].size() ||
          std::memcmp(a[w][u].data(), b[w][u].data(), a[w][u].size() * sizeof(float)) != 0) {
        return false;
      }
    }
  }
  return true;
}

// This rank's copies of old shards: its own and the one its mirror holds.
HeldShard held_by(testing::MirroredRun& run) {
  return [&run](int unit, int old_rank, int what) -> std::span<const float> {
    const int me = static_cast<int>(run.model->unit(unit).shard_rank());
    if (old_rank == me) {
      if (what == 0) return run.model->unit(unit).master_shard();
      return run.opt->state(unit)[static_cast<size_t>(what - 1)];
    }
    if (old_rank == run.mirror->mirrored_rank()) {
      if (what == 0) return run.mirror->params(unit);
      return run.mirror->state(unit)[static_cast<size_t>(what - 1)];
    }
    return {};
  };
}

// n ranks train 3 steps; the ranks in `lost` leave; the survivors reshard. Returns how many survivors
// threw UnrecoverableLoss (the rest matched the state before bitwise, or failed the test).
int shrink_and_reshard(int n, std::vector<int> lost, bool sgd) {
  InProcJob job(n);
  std::atomic<int> unrecoverable{0};
  job.run([&](Communicator& world) {
    auto run = testing::make_mirrored_run(world, sgd);
    for (int s = 0; s < 3; ++s) testing::mirrored_step(*run, world, s);
    const Whole before = gather_all(*run->model, *run->opt);
    if (std::find(lost.begin(), lost.end(), world.rank()) != lost.end()) return;  // this rank is gone
    OldShards old{n, {}, run->opt->steps_taken()};
    for (int r = 0; r < n; ++r) {
      if (std::find(lost.begin(), lost.end(), r) == lost.end()) old.survivors.push_back(r);
    }
    auto shrunk = world.shrink(lost);
    testing::MirroredRun next;  // the job at the new size, its state from the reshard
    FsdpOptions options;
    options.policy.param_dtype = DataType::kFloat32;
    options.policy.redundancy = spec::Redundancy::kBuddy;
    next.model = std::make_unique<FsdpModel>(next.toy.spec(), options, *shrunk, next.tracker);
    next.opt = testing::make_optimizer(*next.model, sgd, next.tracker);
    try {
      live_reshard(old, run->toy.spec(), held_by(*run), *next.model, *next.opt, *shrunk);
    } catch (const UnrecoverableLoss& e) {
      ++unrecoverable;
      EXPECT_NE(std::string(e.what()).find("old ranks"), std::string::npos) << e.what();
      return;
    }
    EXPECT_EQ(next.opt->steps_taken(), 3);
    EXPECT_TRUE(bitwise_equal(gather_all(*next.model, *next.opt), before))
        << "old world " << n << ", lost rank " << lost[0] << ", new rank " << shrunk->rank();
    // Training goes on at the new size with a new mirror, kept bitwise as before.
    next.mirror = std::make_unique<BuddyMirror>(*next.model, *next.opt, next.tracker);
    next.mirror->sync();
    for (int s = 3; s < 5; ++s) testing::mirrored_step(next, *shrunk, s);
    for (int what = 0; what <= next.opt->state_count(); ++what) {
      EXPECT_EQ(testing::mirror_mismatches(next, what), 0) << "new rank " << shrunk->rank() << " buffer " << what;
    }
  });
  return unrecoverable.load();
}

TEST(LiveReshard, FourToThreeEachRankLostInTurn) {
  for (bool sgd : {false, true}) {
    for (int lost = 0; lost < 4; ++lost) EXPECT_EQ(shrink_and_reshard(4, {lost}, sgd), 0) << "lost " << lost;
  }
}

TEST(LiveReshard, ThreeToTwo) {
  for (int lost = 0; lost < 3; ++lost) EXPECT_EQ(shrink_and_reshard(3, {lost}, false), 0) << "lost " << lost;
}

TEST(LiveReshard, NonAdjacentPairSurvives) {
  EXPECT_EQ(shrink_and_reshard(4, {0, 2}, false), 0);  // each lost shard's mirror holder survives
}

TEST(LiveReshard, BothCopiesLostIsUnrecoverableOnEverySurvivor) {
  // Old rank 2's shard lives on 2 and on its mirror holder 1: both lost.
  EXPECT_EQ(shrink_and_reshard(4, {1, 2}, false), 2);
  EXPECT_EQ(shrink_and_reshard(3, {0, 1}, true), 1);
}

// n - 1 ranks train 3 steps (a shrunk job) while the newcomer, the last thread, waits; then all n reshard into a world
// where the newcomer is new rank `newcomer_at`. Everything equals the state before bitwise, on the newcomer too, and
// training goes on.
void grow_back(int n, int newcomer_at, bool sgd) {
  InProcJob job(n);
  std::mutex mu;
  Whole before;  // the same on every member: whole tensors
  job.run([&](Communicator& world) {
    const bool newcomer = world.rank() == n - 1;
    const std::vector<int> excluded{n - 1};
    std::unique_ptr<testing::MirroredRun> run;
    if (!newcomer) {
      auto small = world.shrink(excluded);  // the shrunk job (its old ranks 0..n-2)
      run = testing::make_mirrored_run(*small, sgd);
      for (int s = 0; s < 3; ++s) testing::mirrored_step(*run, *small, s);
      Whole mine = gather_all(*run->model, *run->opt);
      std::lock_guard<std::mutex> lock(mu);
      if (world.rank() == 0) before = std::move(mine);
    }
    // The grown world: the members in order with the newcomer inserted at newcomer_at.
    OldShards old{n - 1, {}, 3};
    for (int r = 0; r < n - 1; ++r) old.survivors.push_back(r);
    old.new_members = old.survivors;
    old.new_members.insert(old.new_members.begin() + newcomer_at, -1);
    const int my_old = newcomer ? -1 : world.rank();
    const int my_new =
        static_cast<int>(std::find(old.new_members.begin(), old.new_members.end(), my_old) - old.new_members.begin());
    auto grown = world.split(0, my_new);
    ASSERT_EQ(grown->rank(), my_new);
    testing::MirroredRun next;
    FsdpOptions options;
    options.policy.param_dtype = DataType::kFloat32;
    options.policy.redundancy = spec::Redundancy::kBuddy;
    next.model = std::make_unique<FsdpModel>(next.toy.spec(), options, *grown, next.tracker);
    next.opt = testing::make_optimizer(*next.model, sgd, next.tracker);
    const HeldShard nothing = [](int, int, int) -> std::span<const float> {
      ADD_FAILURE() << "a newcomer was asked for a shard";
      return {};
    };
    live_reshard(old, next.toy.spec(), newcomer ? nothing : held_by(*run), *next.model, *next.opt, *grown);
    EXPECT_EQ(next.opt->steps_taken(), 3);
    const Whole after = gather_all(*next.model, *next.opt);
    {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_TRUE(bitwise_equal(after, before)) << n - 1 << " -> " << n << ", new rank " << my_new;
    }
    next.mirror = std::make_unique<BuddyMirror>(*next.model, *next.opt, next.tracker);
    next.mirror->sync();
    for (int s = 3; s < 5; ++s) testing::mirrored_step(next, *grown, s);
    for (int what = 0; what <= next.opt->state_count(); ++what) {
      EXPECT_EQ(testing::mirror_mismatches(next, what), 0) << "new rank " << my_new << " buffer " << what;
    }
  });
}

TEST(LiveReshard, GrowsThreeToFourWithANewcomerAtTheEnd) {
  for (bool sgd : {false, true}) grow_back(4, 3, sgd);
}

TEST(LiveReshard, GrowsWithANewcomerAnywhere) {
  for (int at = 0; at < 3; ++at) grow_back(4, at, false);
  grow_back(3, 2, false);  // 2 -> 3
}

// live_reshard of `old` on 2 ranks holding nothing, into the toy model's AdamW: the error it throws.
std::string reshard_from_nothing(const OldShards& old) {
  testing::ToyModel toy;
  InProcJob job(2);
  std::mutex mu;
  std::string error;
  job.run([&](Communicator& world) {
    MemoryTracker tracker;
    FsdpModel target(toy.spec(), FsdpOptions{}, world, tracker);
    AdamW opt(target, AdamWConfig{}, tracker);
    try {
      live_reshard(
          old, toy.spec(), [](int, int, int) { return std::span<const float>(); }, target, opt, world);
      ADD_FAILURE() << "live_reshard did not throw";
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      error = std::string(dynamic_cast<const UnrecoverableLoss*>(&e) ? "unrecoverable: " : "invalid: ") + e.what();
    }
  });
  return error;
}

TEST(LiveReshard, NewMembersMustNameEachSurvivorOnce) {
  const std::string e = reshard_from_nothing(OldShards{2, {0, 1}, 0, {0, 0}});
  EXPECT_EQ(e.rfind("invalid: ", 0), 0u) << e;
  EXPECT_NE(e.find("new_members"), std::string::npos) << e;
}

TEST(LiveReshard, HolderAndMessageAreExact) {
  const OldShards old{4, {0, 3}, 7};
  EXPECT_EQ(shard_holder(old, 0), 0);
  EXPECT_EQ(shard_holder(old, 1), 0);   // its mirror holder
  EXPECT_EQ(shard_holder(old, 2), -1);  // 2 and 1 lost
  EXPECT_EQ(shard_holder(old, 3), 3);
  const std::string e = reshard_from_nothing(old);
  EXPECT_EQ(e.rfind("unrecoverable: ", 0), 0u) << e;
  EXPECT_NE(e.find("unit 0 (fc0): old ranks 2"), std::string::npos) << e;
}

}  // namespace
}  // namespace fsdp::runtime
