// The buddy mirror (runtime/buddy_mirror.h): after K steps of AdamW or SGD with clipping, every rank's
// mirror equals, bit for bit, the master shard and optimizer state of the rank it mirrors, whether the
// gradients travelled before the clip (clipped on arrival: the trainer's order) or after it.
#include "runtime/buddy_mirror.h"

#include <gtest/gtest.h>

#include <cstring>

#include "redundancy_support.h"
#include "sharding/planner.h"
#include "tests/collectives/test_support.h"

namespace fsdp::runtime {
namespace {

using testing::InProcJob;

struct Case {
  int n;
  bool sgd;
  bool exchange_after_clip = false;
};

class BuddyMirrorBitwise : public ::testing::TestWithParam<Case> {};

TEST_P(BuddyMirrorBitwise, MirrorEqualsTheBuddysShardAfterSteps) {
  const Case c = GetParam();
  InProcJob job(c.n);
  job.run([&](Communicator& world) {
    auto run = testing::make_mirrored_run(world, c.sgd);
    EXPECT_EQ(run->mirror->mirrored_rank(), (world.rank() + 1) % c.n);
    EXPECT_EQ(run->mirror->mirror_holder(), (world.rank() - 1 + c.n) % c.n);
    for (int s = 0; s < 4; ++s) {
      testing::mirrored_step(*run, world, s, 12, 0.3, c.exchange_after_clip);
      EXPECT_FALSE(run->mirror->holds_grads()) << "the received gradients outlive apply";
    }
    for (int what = 0; what <= run->opt->state_count(); ++what) {
      EXPECT_EQ(testing::mirror_mismatches(*run, what), 0) << "rank " << world.rank() << " buffer " << what;
    }
    // Tracked on its own: (1 + state_count) x the shard, nothing else left between steps; at the
    // exchange also the received shard and the packed copy of the rank's own.
    int64_t shard = 0;
    for (int u = 0; u < run->model->num_units(); ++u) shard += run->model->unit(u).layout().chunk_numel();
    EXPECT_EQ(run->tracker.current(MemoryCategory::kRedundancy), shard * 4 * (1 + run->opt->state_count()));
    EXPECT_EQ(run->tracker.peak(MemoryCategory::kRedundancy), shard * 4 * (3 + run->opt->state_count()));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, BuddyMirrorBitwise,
                         ::testing::Values(Case{3, false}, Case{3, true}, Case{4, false}, Case{4, true},
                                           Case{3, false, true}, Case{4, true, true}),
                         [](const auto& info) {
                           return "n" + std::to_string(info.param.n) + (info.param.sgd ? "_sgd" : "_adamw") +
                                  (info.param.exchange_after_clip ? "_after_clip" : "");
                         });

TEST(BuddyMirror, ApplyWithoutGradientsNamesTheCall) {
  InProcJob job(2);
  job.run([&](Communicator& world) {
    auto run = testing::make_mirrored_run(world, false);
    EXPECT_THROW(
        {
          try {
            run->mirror->apply(0.1);
          } catch (const std::logic_error& e) {
            EXPECT_NE(std::string(e.what()).find("exchange_grads"), std::string::npos) << e.what();
            throw;
          }
        },
        std::logic_error);
  });
}

TEST(BuddyMirror, RefusesHsdpAndOneRank) {
  for (auto [n, replicate, what] : {std::tuple{4, int64_t{2}, "HSDP"}, std::tuple{1, int64_t{1}, "one rank"}}) {
    InProcJob job(n);
    job.run([&](Communicator& world) {
      testing::ToyModel toy;
      MemoryTracker tracker;
      FsdpOptions options;
      options.mesh = spec::Mesh::for_world(n, replicate);
      FsdpModel model(toy.spec(), options, world, tracker);
      AdamW opt(model, AdamWConfig{}, tracker);
      try {
        BuddyMirror mirror(model, opt, tracker);
        ADD_FAILURE() << "accepted " << what;
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      }
    });
  }
}

// The planner prices the mirror as the runtime tracks it: with and without buddy redundancy, the tracked
// peak of the toy model's steps is the plan's (its activations live outside the tracker; so does the
// planner's for a model without transformer dims).
TEST(BuddyMirror, TrackedPeakIsThePlannedPeak) {
  for (int n : {2, 3}) {
    for (bool mirrored : {false, true}) {
      InProcJob job(n);
      job.run([&](Communicator& world) {
        auto run = testing::make_mirrored_run(world, false, mirrored);
        run->tracker.reset_peaks();  // init_parameters' full-unit scratch is not a step's
        for (int s = 0; s < 3; ++s) testing::mirrored_step(*run, world, s);
        const spec::Policy& policy = run->model->policy();  // redundancy buddy when mirrored
        EXPECT_EQ(policy.redundancy, mirrored ? spec::Redundancy::kBuddy : spec::Redundancy::kNone);
        const auto plan =
            sharding::make_plan(run->toy.spec(), sharding::chip_preset("cpu"), run->model->mesh(), policy);
        EXPECT_EQ(run->tracker.peak_total(), plan.estimate.memory.peak())
            << n << " ranks, " << (mirrored ? "buddy" : "none") << ": redundancy planned "
            << plan.estimate.memory.redundancy << " + " << plan.estimate.memory.redundancy_grads << ", tracked peak "
            << run->tracker.peak(MemoryCategory::kRedundancy);
        EXPECT_EQ(plan.estimate.memory.redundancy + 2 * plan.estimate.memory.redundancy_grads,
                  run->tracker.peak(MemoryCategory::kRedundancy));
      });
    }
  }
}

}  // namespace
}  // namespace fsdp::runtime
