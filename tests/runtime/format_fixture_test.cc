// Files written by an earlier build still read (tests/fixtures/format_v2/README.md says which commit and
// command wrote them): plan files from `fsdp-plan --out` parse and check against the job they were
// planned for (and not against another), and a sharded checkpoint's metadata reads and every chunk of its
// shard files verifies. The checkpoint's resume is tests/train/format_fixture_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proto/plan.pb.h"
#include "runtime/checkpoint/inspect.h"
#include "runtime/plan_check.h"
#include "spec/model_spec.h"

namespace fsdp::runtime {
namespace {

const std::string kFixtures = std::string(FSDP_SOURCE_DIR) + "/tests/fixtures/format_v2";

// One fixture plan and the job its command line described.
struct PlanFixture {
  std::string file;
  std::string model;
  spec::MeshSpec mesh;
  spec::Policy policy;
};

std::vector<PlanFixture> plan_fixtures() {
  spec::Policy fp32;
  fp32.param_dtype = DataType::kFloat32;
  fp32.seq_len = 128;

  spec::Policy ac;  // --seq-len 512 --reshard false --prefetch 2 --ac selective:2
  ac.seq_len = 512;
  ac.reshard.mode = spec::Reshard::Mode::kNever;
  ac.prefetch = 2;
  spec::parse_ac("selective:2", ac);

  spec::Policy mxfp8 = fp32;  // --param-comm mxfp8
  mxfp8.param_comm = spec::CommPrecision::kMxfp8;

  return {
      {"debugmodel_byte_w1.pb", "debugmodel_byte", {.nodes = 1, .chips_per_node = 1, .replicate = 1}, fp32},
      {"debugmodel_byte_hsdp2x2.txtpb", "debugmodel_byte", {.nodes = 2, .chips_per_node = 2, .replicate = 2}, fp32},
      {"llama3_debug_w4_ac.pb", "llama3-debug", {.nodes = 1, .chips_per_node = 4, .replicate = 1}, ac},
      {"debugmodel_byte_moe_ep2.pb",
       "debugmodel_byte_moe",
       {.nodes = 1, .chips_per_node = 4, .replicate = 1, .expert_parallel = 2},
       mxfp8},
  };
}

TEST(FormatFixture, PlanFilesParseAndCheckAgainstTheirJob) {
  for (const PlanFixture& f : plan_fixtures()) {
    SCOPED_TRACE(f.file);
    const proto::ShardingPlan plan = read_plan_file(kFixtures + "/plans/" + f.file);
    const spec::Mesh mesh = spec::Mesh::create(f.mesh);
    const auto diffs = plan_mismatches(plan, spec::model_preset(f.model), mesh, f.policy);
    EXPECT_TRUE(diffs.empty()) << ::testing::PrintToString(diffs);
    EXPECT_NO_THROW(check_plan(plan, spec::model_preset(f.model), mesh, f.policy));
    EXPECT_EQ(plan.mesh().world_size(), mesh.world_size());
  }
}

TEST(FormatFixture, PlanFilesAreRefusedByAnotherJob) {
  for (const PlanFixture& f : plan_fixtures()) {
    SCOPED_TRACE(f.file);
    const proto::ShardingPlan plan = read_plan_file(kFixtures + "/plans/" + f.file);
    spec::MeshSpec wider = f.mesh;
    wider.nodes *= 2;
    const auto diffs = plan_mismatches(plan, spec::model_preset(f.model), spec::Mesh::create(wider), f.policy);
    EXPECT_FALSE(diffs.empty());
    const std::string other = f.model == "llama3-debug" ? "debugmodel_byte" : "llama3-debug";
    spec::MeshSpec dense = f.mesh;  // the other model has no experts to split
    dense.expert_parallel = 1;
    EXPECT_THROW(check_plan(plan, spec::model_preset(other), spec::Mesh::create(dense), f.policy), PlanMismatch);
  }
}

// Written by 2 ranks with a save every step: step-1 holds the whole training state, step-2 (the last
// save) the parameters only; `latest` names step-2.
TEST(FormatFixture, CheckpointMetadataReadsAndEveryChunkVerifies) {
  namespace ck = checkpoint;
  const std::string folder = kFixtures + "/checkpoint";
  EXPECT_EQ(ck::resolve_step_dir(folder), folder + "/step-2");
  for (int step : {1, 2}) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::string dir = folder + "/step-" + std::to_string(step);
    const ck::CheckpointMetadata meta = ck::read_metadata(dir);
    EXPECT_EQ(meta.format_version(), 2u);
    EXPECT_EQ(meta.step(), step);
    EXPECT_EQ(meta.shard_degree(), 2);
    EXPECT_EQ(meta.replicate_degree(), 1);
    EXPECT_EQ(meta.optimizer(), step == 1 ? "adamw" : "");
    EXPECT_EQ(meta.files_size(), 2);
    EXPECT_FALSE(meta.tensors().empty());
    const ck::VerifyReport report = ck::verify_checkpoint(dir);
    EXPECT_TRUE(report.ok()) << ::testing::PrintToString(report.errors);
    EXPECT_EQ(report.files, 2);
    EXPECT_NE(ck::describe(meta, dir).find("tok_embeddings.weight"), std::string::npos);
  }
}

}  // namespace
}  // namespace fsdp::runtime
