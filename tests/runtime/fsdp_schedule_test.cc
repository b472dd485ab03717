// The FSDP schedule alone (runtime/fsdp_schedule.h): prefetch along the fixed and the recorded order in
// forward and backward, who keeps its parameters after forward, one reduce-scatter in flight,
// accumulation, roots nested and called alone; then FsdpModel's collectives following it
// (runtime/lifecycle_trace.h), which fully_shard's are compared with in tests/python.
#include "runtime/fsdp_schedule.h"

#include <gtest/gtest.h>

#include "runtime/lifecycle_trace.h"
#include "tests/collectives/test_support.h"

namespace fsdp::runtime {
namespace {

using After = FsdpSchedule::AfterForward;
using Ints = std::vector<int>;

Ints list(std::span<const int> s) { return {s.begin(), s.end()}; }

const spec::Reshard kDefault = spec::Reshard::parse("default");

TEST(FsdpSchedule, FixedOrderPrefetchesByIndexFromTheFirstForward) {
  FsdpSchedule s = FsdpSchedule::fixed(5);
  EXPECT_EQ(list(s.pre_forward(0, 2)), (Ints{1, 2}));
  EXPECT_EQ(list(s.pre_forward(3, 2)), (Ints{4}));
  EXPECT_EQ(list(s.pre_forward(4, 2)), Ints{});
  EXPECT_EQ(list(s.pre_forward(1, 0)), Ints{});
  EXPECT_EQ(list(s.pre_backward(4, 2)), (Ints{3, 2}));
  EXPECT_EQ(list(s.pre_backward(1, 3)), (Ints{0}));
  EXPECT_EQ(list(s.pre_backward(0, 1)), Ints{});
  // The next step's opening all-gathers: unit 0 and the `prefetch` after it.
  EXPECT_TRUE(s.next_step_gathers(0, 2));
  EXPECT_TRUE(s.next_step_gathers(2, 2));
  EXPECT_FALSE(s.next_step_gathers(3, 2));
  EXPECT_FALSE(s.next_step_gathers(0, 0));
}

TEST(FsdpSchedule, ReshardAfterForwardKeepsTheLastUnit) {
  FsdpSchedule s = FsdpSchedule::fixed(3);
  EXPECT_EQ(s.post_forward(0, kDefault, true), After::kFree);
  EXPECT_EQ(s.post_forward(2, kDefault, true), After::kKeep);
  EXPECT_EQ(s.post_forward(2, spec::Reshard::parse("always"), true), After::kFree);
  EXPECT_EQ(s.post_forward(0, spec::Reshard::parse("never"), true), After::kKeep);
  EXPECT_EQ(s.post_forward(1, spec::Reshard::parse("2"), true), After::kKeepSlice);
  EXPECT_EQ(s.post_forward(2, spec::Reshard::parse("2"), true), After::kKeep);
  // Nothing runs backward (no_grad): free whatever the policy.
  EXPECT_EQ(s.post_forward(0, spec::Reshard::parse("never"), false), After::kFree);
}

// A root R wrapping A (1) and B (2): pre-forward order R A B, post-forward order A B R.
void nested_forward(FsdpSchedule& s, int64_t prefetch, Ints* forward_prefetches, std::vector<After>* after) {
  forward_prefetches->clear();
  after->clear();
  for (int u : {0, 1}) {
    const auto p = s.pre_forward(u, prefetch);
    forward_prefetches->insert(forward_prefetches->end(), p.begin(), p.end());
  }
  after->push_back(s.post_forward(1, kDefault, true));
  const auto p = s.pre_forward(2, prefetch);
  forward_prefetches->insert(forward_prefetches->end(), p.begin(), p.end());
  after->push_back(s.post_forward(2, kDefault, true));
  after->push_back(s.post_forward(0, kDefault, true));
}

TEST(FsdpSchedule, RecordedOrderPrefetchesWhatThePreviousForwardRan) {
  FsdpSchedule s;
  Ints prefetched;
  std::vector<After> after;
  nested_forward(s, 1, &prefetched, &after);
  EXPECT_EQ(prefetched, Ints{}) << "the first forward has no order to follow";
  EXPECT_FALSE(s.forward_open());
  EXPECT_EQ(s.order(), (Ints{0, 1, 2}));
  EXPECT_EQ(s.post_order(), (Ints{1, 2, 0}));
  EXPECT_EQ(after, (std::vector<After>{After::kFree, After::kFree, After::kKeep})) << "the root keeps";
  // Backward: the root first, then post-forward order reversed.
  EXPECT_EQ(list(s.pre_backward(0, 1)), (Ints{2}));
  EXPECT_EQ(list(s.pre_backward(2, 1)), (Ints{1}));
  EXPECT_EQ(list(s.pre_backward(1, 1)), Ints{});
  EXPECT_TRUE(s.in_backward());
  EXPECT_EQ(s.backward_units(), (Ints{0, 2, 1}));
  EXPECT_EQ(s.finish_backward(), -1);
  EXPECT_FALSE(s.in_backward());

  nested_forward(s, 2, &prefetched, &after);
  EXPECT_EQ(prefetched, (Ints{1, 2, 2})) << "R starts A and B, A starts B (already on its way)";
  EXPECT_EQ(s.unused_prefetches(), Ints{});
  EXPECT_EQ(list(s.pre_backward(0, 2)), (Ints{2, 1}));
  EXPECT_TRUE(s.next_step_gathers(0, 1));
  EXPECT_TRUE(s.next_step_gathers(1, 1));
  EXPECT_FALSE(s.next_step_gathers(2, 1));
}

TEST(FsdpSchedule, AForwardThatSkipsAUnitReportsItsPrefetchUnused) {
  FsdpSchedule s;
  Ints prefetched;
  std::vector<After> after;
  nested_forward(s, 2, &prefetched, &after);
  s.finish_backward();
  // This forward runs R and A only (a branch): B, prefetched along the previous order, lands unused.
  EXPECT_EQ(list(s.pre_forward(0, 2)), (Ints{1, 2}));
  EXPECT_EQ(list(s.pre_forward(1, 2)), (Ints{2}));
  EXPECT_EQ(s.post_forward(1, kDefault, true), After::kFree);
  EXPECT_EQ(s.post_forward(0, kDefault, true), After::kKeep);
  EXPECT_EQ(s.unused_prefetches(), (Ints{2}));
  EXPECT_EQ(s.order(), (Ints{0, 1}));
}

TEST(FsdpSchedule, ABlockCalledAloneIsTheRootOfThatCallOnly) {
  FsdpSchedule model, block;  // one per root, as fully_shard keeps them
  Ints prefetched;
  std::vector<After> after;
  nested_forward(model, 1, &prefetched, &after);
  model.finish_backward();
  block.pre_forward(2, 1);
  EXPECT_EQ(block.post_forward(2, kDefault, true), After::kKeep) << "B alone is its forward's root";
  block.finish_backward();
  nested_forward(model, 1, &prefetched, &after);
  EXPECT_EQ(after, (std::vector<After>{After::kFree, After::kFree, After::kKeep})) << "inside R, B reshards again";
  EXPECT_EQ(prefetched, (Ints{1, 2}));
}

TEST(FsdpSchedule, AForwardThatRaisedIsOpenedAnewByItsRoot) {
  FsdpSchedule s;
  s.pre_forward(0, 1);
  s.pre_forward(1, 1);  // raises inside A: no post_forward
  EXPECT_TRUE(s.forward_open());
  s.pre_forward(0, 1);
  s.post_forward(0, kDefault, true);
  EXPECT_FALSE(s.forward_open());
  EXPECT_EQ(s.order(), Ints{0});
}

TEST(FsdpSchedule, OneReduceScatterInFlight) {
  FsdpSchedule s = FsdpSchedule::fixed(3);
  auto r = s.post_backward(2, true);
  EXPECT_TRUE(r.start);
  EXPECT_EQ(r.finish_first, -1);
  r = s.post_backward(1, true);
  EXPECT_TRUE(r.start);
  EXPECT_EQ(r.finish_first, 2) << "the previous unit's finishes before the next starts";
  r = s.post_backward(0, true);
  EXPECT_EQ(r.finish_first, 1);
  EXPECT_EQ(s.finish_backward(), 0) << "the end of backward finishes the last";
  EXPECT_EQ(s.finish_backward(), -1);
}

TEST(FsdpSchedule, AccumulationWithoutSyncReducesNothing) {
  FsdpSchedule s = FsdpSchedule::fixed(2);
  for (int micro = 0; micro < 2; ++micro) {
    EXPECT_FALSE(s.post_backward(1, false).start);
    EXPECT_FALSE(s.post_backward(0, false).start);
    EXPECT_EQ(s.finish_backward(), -1);
  }
  EXPECT_TRUE(s.post_backward(1, true).start);
  EXPECT_EQ(s.post_backward(0, true).finish_first, 1);
  s.discard_step();
  EXPECT_EQ(s.finish_backward(), -1) << "an abandoned step forgets the reduce in flight";
}

// FsdpModel's collectives over 4 units at prefetch 1, default reshard, second step (the first is the
// same: the fixed order prefetches from the start).
TEST(FsdpSchedule, FsdpModelFollowsTheSchedule) {
  spec::Policy policy;
  policy.param_dtype = policy.reduce_dtype = DataType::kFloat32;
  policy.prefetch = 1;
  testing::InProcJob job(2);
  std::vector<std::vector<LifecycleEvent>> traces(2);
  job.run([&](Communicator& c) { traces[static_cast<size_t>(c.rank())] = trace_lifecycle(c, 4, policy, 2); });
  EXPECT_EQ(traces[0], traces[1]);
  std::vector<std::string> step2;
  for (const auto& e : traces[0]) {
    if (e.step == 2) step2.push_back(std::string(1, e.phase) + " " + e.what + " " + std::to_string(e.unit));
  }
  const std::vector<std::string> want = {
      "f all_gather 0", "f all_gather 1", "f all_gather_done 0",  // unit 0 starts 1's
      "f all_gather 2", "f all_gather_done 1",                    // ... each the next
      "f all_gather 3", "f all_gather_done 2", "f all_gather_done 3",
      // backward: unit 3 kept its parameters; each unit prefetches the one before it; one reduce in flight
      "b all_gather 2", "b reduce_scatter 3",  //
      "b all_gather 1", "b all_gather_done 2", "b reduce_scatter_done 3", "b reduce_scatter 2", "b all_gather 0",
      "b all_gather_done 1", "b reduce_scatter_done 2", "b reduce_scatter 1", "b all_gather_done 0",
      "b reduce_scatter_done 1", "b reduce_scatter 0", "b reduce_scatter_done 0"};
  EXPECT_EQ(step2, want);
}

}  // namespace
}  // namespace fsdp::runtime
