// Buddy redundancy priced by the planner (runtime/buddy_mirror.h): one more copy of the master shard and
// optimizer state per rank, the received grad shard (and the packed copy sent) in the step's peak, one
// fp32 grad shard sent per rank per step; nothing at one rank; refused where the runtime refuses it.
#include <gtest/gtest.h>

#include "sharding/plan_io.h"
#include "sharding/planner.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {
namespace {

Plan plan_for(spec::MeshSpec mesh, spec::Redundancy r, spec::Optimizer opt = spec::Optimizer::kAdamW) {
  spec::Policy p;
  p.seq_len = 256;
  p.optimizer = opt;
  p.redundancy = r;
  return make_plan(spec::model_preset("llama3-debug"), chip_preset("cpu"), spec::Mesh::create(mesh), p);
}

const CommEstimate* find(const PlanEstimate& e, const std::string& collective) {
  for (const auto& c : e.comm) {
    if (c.collective == collective) return &c;
  }
  return nullptr;
}

TEST(RedundancyPlan, BuddyAddsTheMirrorAndOneGradShardSent) {
  for (auto opt : {spec::Optimizer::kAdamW, spec::Optimizer::kSgdMomentum}) {
    const Plan none = plan_for(spec::MeshSpec{1, 4}, spec::Redundancy::kNone, opt);
    const Plan buddy = plan_for(spec::MeshSpec{1, 4}, spec::Redundancy::kBuddy, opt);
    int64_t shard = 0;
    for (const auto& u : buddy.units) shard += u.chunk_numel();
    const auto& m = buddy.estimate.memory;
    EXPECT_EQ(m.redundancy, 4 * shard + m.optimizer_state);
    EXPECT_EQ(m.redundancy_grads, 4 * shard);
    EXPECT_EQ(m.model_states(), none.estimate.memory.model_states());
    // The mirror is always live; the received grads live where the backward's buffers are gone.
    EXPECT_GE(m.peak(), none.estimate.memory.peak() + m.redundancy);
    EXPECT_LE(m.peak(), none.estimate.memory.peak() + m.redundancy + 2 * m.redundancy_grads);
    const CommEstimate* row = find(buddy.estimate, "buddy_grads");
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->bytes_sent_per_rank, static_cast<double>(4 * shard));
    EXPECT_EQ(row->calls, 1);
    EXPECT_EQ(find(none.estimate, "buddy_grads"), nullptr);
    EXPECT_GT(buddy.estimate.time.redundancy, 0);
    EXPECT_GT(buddy.estimate.time.step, none.estimate.time.step);
    EXPECT_EQ(none.estimate.time.redundancy, 0);
  }
}

TEST(RedundancyPlan, ShownInTheTableAndJsonOnlyWhenAsked) {
  const auto none = to_proto(plan_for(spec::MeshSpec{1, 2}, spec::Redundancy::kNone));
  const auto buddy = to_proto(plan_for(spec::MeshSpec{1, 2}, spec::Redundancy::kBuddy));
  EXPECT_FALSE(none.has_redundancy());
  EXPECT_EQ(format_plan(none, false).find("redundancy"), std::string::npos);
  EXPECT_EQ(to_json(none).find("redundancy"), std::string::npos);
  ASSERT_TRUE(buddy.has_redundancy());
  EXPECT_EQ(buddy.redundancy().mode(), "buddy");
  EXPECT_NE(format_plan(buddy, false).find("redundancy: buddy  +"), std::string::npos) << format_plan(buddy, false);
  EXPECT_NE(format_plan(buddy, false).find("MiB sent per rank per step"), std::string::npos);
}

TEST(RedundancyPlan, OneRankHasNoBuddyAndHsdpIsRefused) {
  const Plan one = plan_for(spec::MeshSpec{1, 1}, spec::Redundancy::kBuddy);
  EXPECT_EQ(one.estimate.memory.redundancy, 0);
  EXPECT_EQ(one.estimate.memory.peak(), plan_for(spec::MeshSpec{1, 1}, spec::Redundancy::kNone).estimate.memory.peak());
  try {
    plan_for(spec::MeshSpec{1, 4, 2, 2}, spec::Redundancy::kBuddy);
    ADD_FAILURE() << "HSDP accepted";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("policy.redundancy = buddy needs plain FSDP"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdp::sharding
