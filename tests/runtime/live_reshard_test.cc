// The in-memory reshard (runtime/live_reshard.h): N ranks train a few steps with buddy mirrors (or as HSDP,
// whose replicas are the redundancy), one (or two) of them is lost, and the survivors rebuild the sharded
// state at the new size from their own shards, the other replicas' and the mirrors: the whole parameters
// and optimizer state equal those before, bit for bit. Growing back, a newcomer that holds nothing
// receives its part the same way.
#include "runtime/live_reshard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "redundancy_support.h"
#include "spec/fault_tolerance.h"
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

// This rank's copies of old shards: its own (old rank `me`) and the one its mirror holds.
HeldShard held_by(testing::MirroredRun& run, int me) {
  return [&run, me](int unit, int old_rank, int what) -> std::span<const float> {
    if (old_rank == me) {
      if (what == 0) return run.model->unit(unit).master_shard();
      return run.opt->state(unit)[static_cast<size_t>(what - 1)];
    }
    if (run.mirror && old_rank == run.mirror->mirrored_rank()) {
      if (what == 0) return run.mirror->params(unit);
      return run.mirror->state(unit)[static_cast<size_t>(what - 1)];
    }
    return {};
  };
}

// n ranks (replicate x n / replicate; plain FSDP keeps buddy mirrors, HSDP none) train 3 steps; the ranks
// in `lost` leave; the survivors reshard into spec::mesh_after_loss's mesh. Returns how many survivors threw
// UnrecoverableLoss (the rest matched the state before bitwise, or failed the test).
int shrink_and_reshard(int n, std::vector<int> lost, bool sgd, int replicate = 1) {
  const spec::Mesh mesh = spec::Mesh::for_world(n, replicate);
  const bool mirrored = replicate == 1;
  InProcJob job(n);
  std::atomic<int> unrecoverable{0};
  job.run([&](Communicator& world) {
    auto run = testing::make_mirrored_run(world, sgd, mirrored, mesh);
    for (int s = 0; s < 3; ++s) testing::mirrored_step(*run, world, s);
    // This rank's replica's whole state: a survivor's reshard must match it whichever replica sent it.
    const Whole before = gather_all(*run->model, *run->opt);
    if (std::find(lost.begin(), lost.end(), world.rank()) != lost.end()) return;  // this rank is gone
    OldShards old{n, {}, run->opt->steps_taken(), mesh.shard_degree(), mirrored};
    for (int r = 0; r < n; ++r) {
      if (std::find(lost.begin(), lost.end(), r) == lost.end()) old.survivors.push_back(r);
    }
    auto shrunk = world.shrink(lost);
    testing::MirroredRun next;  // the job at the new size, its state from the reshard
    FsdpOptions options;
    options.policy.param_dtype = DataType::kFloat32;
    options.mesh = spec::mesh_after_loss(mesh, shrunk->size());
    const bool mirror_after = options.mesh->replicate_degree() == 1 && shrunk->size() > 1;
    if (mirror_after) options.policy.redundancy = spec::Redundancy::kBuddy;
    next.model = std::make_unique<FsdpModel>(next.toy.spec(), options, *shrunk, next.tracker);
    next.opt = testing::make_optimizer(*next.model, sgd, next.tracker);
    try {
      live_reshard(old, run->toy.spec(), held_by(*run, world.rank()), *next.model, *next.opt, *shrunk);
    } catch (const UnrecoverableLoss& e) {
      ++unrecoverable;
      EXPECT_NE(std::string(e.what()).find("old ranks"), std::string::npos) << e.what();
      return;
    }
    EXPECT_EQ(next.opt->steps_taken(), 3);
    EXPECT_TRUE(bitwise_equal(gather_all(*next.model, *next.opt), before))
        << "old world " << replicate << " x " << n / replicate << ", lost rank " << lost[0] << ", new rank "
        << shrunk->rank() << " of " << options.mesh->replicate_degree() << " x " << options.mesh->shard_degree();
    // Training goes on at the new size, with a new mirror where it is plain FSDP, kept bitwise as before.
    if (mirror_after) {
      next.mirror = std::make_unique<BuddyMirror>(*next.model, *next.opt, next.tracker);
      next.mirror->sync();
    }
    for (int s = 3; s < 5; ++s) testing::mirrored_step(next, *shrunk, s);
    for (int what = 0; mirror_after && what <= next.opt->state_count(); ++what) {
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
    live_reshard(old, next.toy.spec(), newcomer ? nothing : held_by(*run, my_old), *next.model, *next.opt, *grown);
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
  const std::string e = reshard_from_nothing(OldShards{2, {0, 1}, 0, 0, true, {0, 0}});
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

// HSDP 2 x 2 into FSDP over the 3 survivors (spec::mesh_after_loss), each rank lost in turn: its shard
// comes from the other replica's rank of the same shard index.
TEST(LiveReshard, HsdpTwoByTwoEachRankLostInTurn) {
  for (bool sgd : {false, true}) {
    for (int lost = 0; lost < 4; ++lost) {
      EXPECT_EQ(shrink_and_reshard(4, {lost}, sgd, /*replicate=*/2), 0) << "lost " << lost;
    }
  }
}

TEST(LiveReshard, HsdpKeepsGoingWhileEveryShardHasAReplica) {
  EXPECT_EQ(shrink_and_reshard(4, {0, 3}, false, 2), 0);  // shard 0 from rank 2, shard 1 from rank 1: FSDP 2
  EXPECT_EQ(shrink_and_reshard(6, {1, 4}, false, 3), 0);  // 3 x 2 into HSDP 2 x 2
}

TEST(LiveReshard, HsdpLosingEveryReplicaOfAShardIsUnrecoverable) {
  EXPECT_EQ(shrink_and_reshard(4, {0, 2}, false, 2), 2);  // shard 0 lived on ranks 0 and 2
}

TEST(LiveReshard, ShardSourceRules) {
  // HSDP 2 x 2 without mirrors: the lowest surviving rank of the shard index, itself the owner.
  const OldShards hsdp{4, {1, 2, 3}, 0, 2, false};
  EXPECT_EQ(shard_source(hsdp, 0).holder, 2);
  EXPECT_EQ(shard_source(hsdp, 0).owner, 2);
  EXPECT_EQ(shard_source(hsdp, 1).holder, 1);
  EXPECT_EQ(shard_holder(OldShards{4, {1, 3}, 0, 2, false}, 0), -1);
  // Plain FSDP over 4 with mirrors: rank 1's shard from its mirror holder 0.
  const OldShards plain{4, {0, 2, 3}, 0};
  EXPECT_EQ(shard_source(plain, 1).holder, 0);
  EXPECT_EQ(shard_source(plain, 1).owner, 1);
  EXPECT_EQ(shard_holder(OldShards{4, {0, 2, 3}, 0, 0, false}, 1), -1);  // no mirror: gone
}

}  // namespace
}  // namespace fsdp::runtime
