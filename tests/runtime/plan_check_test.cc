// A plan describes the layout the runtime builds: the planner's own plan for the model, mesh and policy
// passes; a plan of another model, mesh or policy is refused with every difference named.
#include "runtime/plan_check.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "proto/plan.pb.h"
#include "sharding/chip_profile.h"
#include "sharding/plan_io.h"
#include "sharding/planner.h"

namespace fsdp::runtime {
namespace {

spec::ModelSpec llama(int64_t dim, int64_t layers) {
  return spec::make_llama("m", spec::ModelDims{.dim = dim,
                                               .layers = layers,
                                               .n_heads = 4,
                                               .n_kv_heads = 2,
                                               .vocab = 96,
                                               .ffn_hidden = spec::llama_ffn_hidden(dim, 16, 0)});
}

spec::Mesh mesh(int64_t world, int64_t replicate) { return spec::Mesh::for_world(world, replicate); }

proto::ShardingPlan plan_for(const spec::ModelSpec& model, int64_t world, int64_t replicate,
                             const spec::Policy& policy) {
  return sharding::to_proto(sharding::make_plan(model, sharding::chip_preset("cpu"), mesh(world, replicate), policy));
}

spec::Policy fp32_policy() {
  spec::Policy p;
  p.param_dtype = DataType::kFloat32;
  return p;
}

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines) {
    if (l.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(PlanCheck, ThePlannersOwnPlanMatches) {
  const auto model = llama(32, 2);
  for (int64_t world : {1, 3, 4}) {
    EXPECT_TRUE(
        plan_mismatches(plan_for(model, world, 1, fp32_policy()), model, mesh(world, 1), fp32_policy()).empty());
  }
  EXPECT_TRUE(plan_mismatches(plan_for(model, 4, 2, fp32_policy()), model, mesh(4, 2), fp32_policy()).empty());
}

TEST(PlanCheck, AnotherModelIsNamedByUnitParameterAndShape) {
  const auto diffs =
      plan_mismatches(plan_for(llama(32, 3), 2, 1, fp32_policy()), llama(48, 2), mesh(2, 1), fp32_policy());
  EXPECT_TRUE(mentions(diffs, "units: 5 in the plan, 4 in this job")) << ::testing::PrintToString(diffs);
  EXPECT_TRUE(mentions(diffs,
                       "unit 0 (tok_embeddings): parameter 0 (tok_embeddings.weight): shape [96, 32] in the "
                       "plan, [96, 48] in this job"))
      << ::testing::PrintToString(diffs);
}

TEST(PlanCheck, AnotherMeshOrPolicyIsNamed) {
  const auto model = llama(32, 2);
  const auto diffs = plan_mismatches(plan_for(model, 4, 1, fp32_policy()), model, mesh(2, 1), spec::Policy{});
  EXPECT_TRUE(mentions(diffs, "mesh: world size 4 in the plan, 2 in this job"));
  EXPECT_TRUE(mentions(diffs, "mesh: shard degree 4 in the plan, 2 in this job"));
  EXPECT_TRUE(mentions(diffs, "policy: param dtype"));
  EXPECT_TRUE(mentions(diffs, "rows per rank"));  // the layout itself differs at another shard degree
  const auto hsdp = plan_mismatches(plan_for(model, 4, 2, fp32_policy()), model, mesh(4, 1), fp32_policy());
  EXPECT_TRUE(mentions(hsdp, "mesh: replicate degree 2 in the plan, 1 in this job"));
  // Activation checkpointing, mode and layer interval; a plan's plain "selective" is the op policy.
  spec::Policy every2 = fp32_policy();
  spec::parse_ac("selective:2", every2);
  const auto ac = plan_mismatches(plan_for(model, 2, 1, every2), model, mesh(2, 1), fp32_policy());
  EXPECT_TRUE(mentions(ac, "policy: activation checkpointing selective:2 in the plan, none in this job"))
      << ::testing::PrintToString(ac);
  spec::Policy op = fp32_policy();
  spec::parse_ac("selective", op);
  auto old_style = plan_for(model, 2, 1, op);
  old_style.mutable_policy()->set_activation_checkpointing("selective");
  EXPECT_TRUE(plan_mismatches(old_style, model, mesh(2, 1), op).empty());
}

// MXFP8 on the wire: a plan carries what its collectives send (an auto-plan may have chosen MXFP8); a job
// sending something else is refused naming the key, and a plan written before the field means the default.
TEST(PlanCheck, AnotherCommunicationPrecisionIsNamedByItsKey) {
  const auto model = llama(32, 2);
  spec::Policy mx = fp32_policy();
  mx.param_comm = spec::CommPrecision::kMxfp8;
  const auto plan = plan_for(model, 2, 1, mx);
  EXPECT_TRUE(plan_mismatches(plan, model, mesh(2, 1), mx).empty());
  const auto diffs = plan_mismatches(plan, model, mesh(2, 1), fp32_policy());
  EXPECT_TRUE(mentions(diffs, "policy: training.param_comm_dtype mxfp8 in the plan, default in this job"))
      << ::testing::PrintToString(diffs);
  auto old_file = plan_for(model, 2, 1, fp32_policy());
  old_file.mutable_policy()->clear_param_comm();
  old_file.mutable_policy()->clear_grad_comm();
  EXPECT_TRUE(plan_mismatches(old_file, model, mesh(2, 1), fp32_policy()).empty());
}

// Expert parallelism: a plan carries its degree; one for another degree (or none) is refused naming the
// key, and the planner's own plan for the job's degree passes.
TEST(PlanCheck, AnotherExpertParallelDegreeIsNamedByItsKey) {
  const auto model = spec::make_llama("moe", spec::debug_moe_model_dims());
  const auto cpu = sharding::chip_preset("cpu");
  const auto ep2 = mesh(4, 1).with_expert_parallel(2);
  const auto plan2 = sharding::to_proto(sharding::make_plan(model, cpu, ep2, fp32_policy()));
  EXPECT_EQ(plan2.mesh().expert_parallel_degree(), 2);
  EXPECT_TRUE(plan_mismatches(plan2, model, ep2, fp32_policy()).empty());
  const auto diffs = plan_mismatches(plan2, model, mesh(4, 1), fp32_policy());
  EXPECT_TRUE(mentions(diffs, "mesh: parallelism.expert_parallel_degree 2 in the plan, 1 in this job"))
      << ::testing::PrintToString(diffs);
  const auto plan1 = sharding::to_proto(sharding::make_plan(model, cpu, mesh(4, 1), fp32_policy()));
  EXPECT_TRUE(mentions(plan_mismatches(plan1, model, ep2, fp32_policy()),
                       "mesh: parallelism.expert_parallel_degree 1 in the plan, 2 in this job"));
  auto old_file = plan1;  // written before plans carried the degree
  old_file.mutable_mesh()->clear_expert_parallel_degree();
  EXPECT_TRUE(plan_mismatches(old_file, model, mesh(4, 1), fp32_policy()).empty());
}

TEST(PlanCheck, CheckThrowsWithTheDifferencesAndFilesRoundTrip) {
  const auto model = llama(32, 2);
  const auto plan = plan_for(model, 2, 1, fp32_policy());
  EXPECT_NO_THROW(check_plan(plan, model, mesh(2, 1), fp32_policy()));
  try {
    check_plan(plan, llama(64, 2), mesh(2, 1), fp32_policy());
    FAIL() << "expected PlanMismatch";
  } catch (const PlanMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("does not match"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more"), std::string::npos) << e.what();  // many differences, capped
  }
  const auto dir = std::filesystem::temp_directory_path();
  const auto bin = (dir / "fsdp_plan_check.pb").string(), text = (dir / "fsdp_plan_check.txtpb").string();
  std::ofstream(bin, std::ios::binary) << sharding::to_binary(plan);
  std::ofstream(text) << sharding::to_text(plan);
  EXPECT_TRUE(plan_mismatches(read_plan_file(bin), model, mesh(2, 1), fp32_policy()).empty());
  EXPECT_TRUE(plan_mismatches(read_plan_file(text), model, mesh(2, 1), fp32_policy()).empty());
  std::ofstream(bin, std::ios::binary) << "not a plan";
  EXPECT_THROW(read_plan_file(bin), PlanMismatch);
  EXPECT_THROW(read_plan_file((dir / "no_such_plan.pb").string()), PlanMismatch);
  std::filesystem::remove(bin);
  std::filesystem::remove(text);
}

}  // namespace
}  // namespace fsdp::runtime
