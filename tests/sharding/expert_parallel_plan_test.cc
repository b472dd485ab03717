// The planner under expert parallelism: the units and memory a rank holds, the all-to-all's volume and
// time by link level, the expert collectives' groups, the EP search of --auto, and the degrees refused.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "sharding/auto_planner.h"
#include "sharding/cost_model.h"
#include "sharding/planner.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {
namespace {

// One MoE block: dim 8, 2 heads (kv 2, head 4), 4 experts of width 8, top 2, no shared expert, vocab 16.
spec::ModelSpec tiny_moe() {
  return spec::make_llama("tiny-moe", spec::ModelDims{.dim = 8,
                                                      .layers = 1,
                                                      .n_heads = 2,
                                                      .vocab = 16,
                                                      .ffn_hidden = spec::llama_ffn_hidden(8, 8, 0),
                                                      .moe = {.num_experts = 4, .top_k = 2, .expert_hidden = 8}});
}

spec::Policy fp32(int64_t seq_len = 16) {
  spec::Policy p;
  p.param_dtype = DataType::kFloat32;
  p.seq_len = seq_len;
  return p;
}

const CommEstimate* find(const PlanEstimate& e, const std::string& collective, spec::LinkLevel level) {
  for (const auto& c : e.comm) {
    if (c.collective == collective && c.level == level) return &c;
  }
  return nullptr;
}

TEST(ExpertParallelPlan, UnitsAndMemoryByHand) {
  const spec::ModelSpec m = tiny_moe();
  const spec::Mesh mesh = spec::Mesh::create(spec::MeshSpec{1, 4, 1, 4, 2});
  const Plan plan = make_plan(m, chip_preset("cpu"), mesh, fp32());
  // tok_embeddings, layers.0 without experts, layers.0.moe.experts (2 of the 4), output.
  ASSERT_EQ(plan.units.size(), 4u);
  EXPECT_EQ(plan.rank_model.units[2].name, "layers.0.moe.experts");
  // Dense units shard over the 4 ranks, the experts over 4 / 2 = 2.
  EXPECT_EQ(plan.units[1].shard_degree(), 4);
  EXPECT_EQ(plan.units[2].shard_degree(), 2);
  // layers.0 without experts, per rank: wq wk wv wo 8 rows / 4 = 2 x 8 = 16 each, router 4 rows -> 1 x 8,
  // two norms of 8 -> 2 each: 76. Experts: 2 experts x w1 w2 w3 of 8 x 8, 8 rows / 2 ranks = 4 x 8 = 32
  // each: 192. Embedding 16 rows / 4 x 8 = 32; output norm 2 + head 4 x 8 = 34.
  EXPECT_EQ(plan.units[1].chunk_numel(), 76);
  EXPECT_EQ(plan.units[2].chunk_numel(), 192);
  EXPECT_EQ(plan.units[2].flat_numel(), 384);  // a rank gathers only its 2 experts
  EXPECT_EQ(plan.estimate.memory.param_shards, 4 * (32 + 76 + 192 + 34));
  EXPECT_EQ(plan.estimate.memory.optimizer_state, 8 * (32 + 76 + 192 + 34));
  // Without EP the same model states (even splits), but layers.0 gathers all 4 experts: 4 x (76 + 192).
  const Plan dense = make_plan(m, chip_preset("cpu"), mesh.with_expert_parallel(1), fp32());
  ASSERT_EQ(dense.units.size(), 3u);
  EXPECT_EQ(dense.units[1].flat_numel(), 4 * (76 + 192));
  EXPECT_EQ(dense.estimate.memory.param_shards, plan.estimate.memory.param_shards);
  EXPECT_LT(plan.estimate.memory.unsharded_params, dense.estimate.memory.unsharded_params);
  // A MoE block keeps k * 3 * dim more per token under EP (the rows received, expert-major in and out).
  EXPECT_EQ(layer_saved_elements_per_token(m.dims, spec::ActivationCheckpointing::kNone, 2) -
                layer_saved_elements_per_token(m.dims, spec::ActivationCheckpointing::kNone, 1),
            2 * 3 * 8);
  EXPECT_EQ(layer_saved_elements_per_token(m.dims, spec::ActivationCheckpointing::kFull, 2), 8);
  // The same model FLOPs: the rank's 2 experts compute the k rows per token routed to them.
  EXPECT_DOUBLE_EQ(plan.estimate.time.model_flops_per_rank, dense.estimate.time.model_flops_per_rank);
}

TEST(ExpertParallelPlan, AllToAllCostByHand) {
  // 1024 bytes over 4 ranks, 2 on this server: 256 B to the local peer, 2 x 256 B over the network.
  const AllToAllCost c = all_to_all_cost(1024, 4, 2, Link{100, 1}, Link{10, 2});
  EXPECT_DOUBLE_EQ(c.intra_bytes, 256);
  EXPECT_DOUBLE_EQ(c.inter_bytes, 512);
  EXPECT_DOUBLE_EQ(c.intra_seconds, 1 + 256.0 / 100);
  EXPECT_DOUBLE_EQ(c.inter_seconds, 2 * 2 + 512.0 / 10);
  EXPECT_DOUBLE_EQ(c.seconds(), c.intra_seconds + c.inter_seconds);
  EXPECT_DOUBLE_EQ(all_to_all_cost(1024, 1, 1, Link{100, 1}, Link{10, 2}).seconds(), 0);
  EXPECT_EQ(moe_all_to_alls(spec::ActivationCheckpointing::kNone), 4);
  EXPECT_EQ(moe_all_to_alls(spec::ActivationCheckpointing::kFull), 6);
}

TEST(ExpertParallelPlan, AllToAllVolumeAndExpertGroupsInThePlan) {
  const spec::ModelSpec m = tiny_moe();
  // 16 tokens x top 2 x dim 8 x 4 bytes (fp32 compute) = 1024 bytes a call; half leaves the rank at ep 2.
  const Plan plan = make_plan(m, chip_preset("cpu"), spec::Mesh::create(spec::MeshSpec{1, 4, 1, 4, 2}), fp32());
  const CommEstimate* a2a = find(plan.estimate, "all_to_all", spec::LinkLevel::kIntra);
  ASSERT_NE(a2a, nullptr);
  EXPECT_EQ(a2a->group_size, 2);
  EXPECT_EQ(a2a->calls, 4);  // dispatch and combine, forward and backward, one block
  EXPECT_EQ(a2a->buffer_bytes, 4 * 1024);
  EXPECT_DOUBLE_EQ(a2a->bytes_sent_per_rank, 4 * 512.0);
  EXPECT_EQ(find(plan.estimate, "all_to_all", spec::LinkLevel::kInter), nullptr);
  EXPECT_GT(plan.estimate.time.all_to_all, 0);
  EXPECT_EQ(find(plan.estimate, "expert_all_gather_fwd", spec::LinkLevel::kIntra)->group_size, 2);
  EXPECT_EQ(find(plan.estimate, "expert_reduce_scatter", spec::LinkLevel::kIntra)->group_size, 2);
  EXPECT_EQ(find(plan.estimate, "all_gather_forward", spec::LinkLevel::kIntra)->group_size, 4);
  // Full checkpointing recomputes the block's forward: its two all-to-alls again.
  spec::Policy full = fp32();
  full.ac = spec::ActivationCheckpointing::kFull;
  EXPECT_EQ(find(make_plan(m, chip_preset("cpu"), spec::Mesh::create(spec::MeshSpec{1, 4, 1, 4, 2}), full).estimate,
                 "all_to_all", spec::LinkLevel::kIntra)
                ->calls,
            6);
  // EP 4 over 2 servers of 2: one round to the local peer, two over the network, 256 bytes each.
  const Plan spread = make_plan(m, chip_preset("cpu"), spec::Mesh::create(spec::MeshSpec{2, 2, 1, 4, 4}), fp32());
  EXPECT_DOUBLE_EQ(find(spread.estimate, "all_to_all", spec::LinkLevel::kIntra)->bytes_sent_per_rank, 4 * 256.0);
  EXPECT_DOUBLE_EQ(find(spread.estimate, "all_to_all", spec::LinkLevel::kInter)->bytes_sent_per_rank, 4 * 512.0);
  // No expert parallelism: no all-to-all, no expert collectives.
  const Plan none = make_plan(m, chip_preset("cpu"), spec::Mesh::create(spec::MeshSpec{1, 4}), fp32());
  for (const auto& c : none.estimate.comm) EXPECT_EQ(c.collective.find("all_to_all"), std::string::npos);
  EXPECT_EQ(none.estimate.time.all_to_all, 0);
}

TEST(ExpertParallelPlan, AutoPicksExpertParallelWhenExpertsDominateMemory) {
  // 16 experts 4096 wide per block: a block's unsharded experts (201 M parameters, 403 MB in bf16, twice
  // with the all-gather buffer) and the model states (0.38 GiB) do not fit 1 GiB less 10%; a rank's
  // share of the experts does.
  const spec::ModelSpec m =
      spec::make_llama("wide-experts", spec::ModelDims{.dim = 1024,
                                                       .layers = 2,
                                                       .n_heads = 8,
                                                       .vocab = 256,
                                                       .ffn_hidden = spec::llama_ffn_hidden(1024, 256, 0),
                                                       .moe = {.num_experts = 16, .top_k = 2, .expert_hidden = 4096}});
  ChipProfile chip = chip_preset("h100");
  chip.memory_bytes = 1.0 * 1024 * 1024 * 1024;
  AutoPlanOptions o;
  o.nodes = 1;
  o.chips_per_node = 16;
  o.base.seq_len = 256;
  o.prefetch_choices = {0, 1};
  const AutoPlanResult r = auto_plan(m, chip, o);
  ASSERT_TRUE(r.best.has_value()) << r.explanation;
  EXPECT_GT(r.best->mesh.expert_parallel_degree(), 1) << r.explanation;
  for (const auto& c : r.top) EXPECT_GT(c.mesh.expert_parallel_degree(), 1);
  // Nothing fits without expert parallelism.
  o.expert_parallel_choices = {1};
  EXPECT_FALSE(auto_plan(m, chip, o).best.has_value());
}

TEST(ExpertParallelPlan, AutoKeepsADenseModelWithoutExpertParallelism) {
  AutoPlanOptions o;
  o.nodes = 1;
  o.chips_per_node = 8;
  const AutoPlanResult r = auto_plan(spec::model_preset("llama3-8b"), chip_preset("h100"), o);
  ASSERT_TRUE(r.best.has_value());
  EXPECT_EQ(r.best->mesh.expert_parallel_degree(), 1);
  for (const auto& c : r.top) EXPECT_EQ(c.mesh.expert_parallel_degree(), 1);
}

void expect_refused(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected: " << part;
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(ExpertParallelPlan, DegreesRefusedNamingTheKey) {
  const spec::ModelSpec moe = spec::make_llama("moe", spec::debug_moe_model_dims());  // 8 experts
  const ChipProfile cpu = chip_preset("cpu");
  expect_refused(
      [&] {
        make_plan(moe, cpu, spec::Mesh::create(spec::MeshSpec{1, 6, 1, 6, 3}), fp32());
      },
      "parallelism.expert_parallel_degree = 3 must divide the number of experts 8");
  expect_refused(
      [&] {
        spec::Mesh::create(spec::MeshSpec{1, 6, 1, 6, 4});
      },
      "parallelism.expert_parallel_degree = 4 must divide the data-parallel shard degree 6");
  expect_refused(
      [&] {
        make_plan(spec::model_preset("llama3-debug"), cpu, spec::Mesh::create(spec::MeshSpec{1, 2, 1, 2, 2}), fp32());
      },
      "parallelism.expert_parallel_degree = 2 needs a MoE model");
  AutoPlanOptions o;
  o.chips_per_node = 6;
  o.expert_parallel_choices = {3};
  expect_refused([&] { auto_plan(moe, cpu, o); },
                 "parallelism.expert_parallel_degree: none of 3 divides both a shard degree of the 6 ranks and the 8 "
                 "experts");
}

}  // namespace
}  // namespace fsdp::sharding
