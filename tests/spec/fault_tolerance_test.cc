// spec/fault_tolerance.h and its JobSpec rules: what a [fault_tolerance] section may say.
#include "spec/fault_tolerance.h"

#include <gtest/gtest.h>

#include <string>

#include "spec/job_spec.h"
#include "spec/spec_error.h"

namespace fsdp::spec {
namespace {

JobSpec job(int64_t world, int64_t replicate) {
  JobSpec j{make_llama("debug", debug_model_dims()), Policy{}, Mesh::for_world(world, replicate)};
  j.fault_tolerance.enable = true;
  j.policy.redundancy = Redundancy::kBuddy;
  return j;
}

std::string refusal(const JobSpec& j) {
  try {
    validate(j);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

TEST(FaultTolerance, ModesParseAndUnknownOnesNameTheChoices) {
  EXPECT_EQ(parse_redundancy("buddy"), Redundancy::kBuddy);
  EXPECT_EQ(parse_redundancy("none"), Redundancy::kNone);
  EXPECT_EQ(name(Redundancy::kBuddy), "buddy");
  try {
    parse_redundancy("parity");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("expected buddy or none"), std::string::npos) << e.what();
  }
}

TEST(FaultTolerance, PlainFsdpWithBuddyIsAccepted) { EXPECT_EQ(refusal(job(4, 1)), ""); }

TEST(FaultTolerance, EachRuleNamesItsKey) {
  JobSpec j = job(4, 1);
  j.fault_tolerance.min_world_size = 5;
  EXPECT_NE(refusal(j).find("fault_tolerance.min_world_size = 5"), std::string::npos) << refusal(j);
  j = job(4, 1);
  j.fault_tolerance.recovery_timeout = std::chrono::milliseconds(0);
  EXPECT_NE(refusal(j).find("fault_tolerance.recovery_timeout_ms"), std::string::npos) << refusal(j);
  j = job(4, 1);
  j.policy.redundancy = Redundancy::kNone;  // the policy must keep what the section asks for
  EXPECT_NE(refusal(j).find("policy.redundancy = none"), std::string::npos) << refusal(j);
  j = job(4, 2);  // HSDP keeps no mirror: its replicas hold every shard
  EXPECT_NE(refusal(j).find("keeps none on HSDP (replicate 2: the replicas hold every shard"), std::string::npos)
      << refusal(j);
}

TEST(FaultTolerance, HsdpIsAcceptedWithoutAMirrorAndExpertParallelismIsRefused) {
  JobSpec j = job(4, 2);
  EXPECT_EQ(j.fault_tolerance.effective_redundancy(j.mesh), Redundancy::kNone);
  j.policy.redundancy = Redundancy::kNone;
  EXPECT_EQ(refusal(j), "");
  j = JobSpec{make_llama("moe", debug_moe_model_dims()), Policy{}, Mesh::for_world(4, 1).with_expert_parallel(2)};
  j.fault_tolerance.enable = true;
  j.policy.redundancy = Redundancy::kBuddy;
  EXPECT_NE(refusal(j).find("fault_tolerance.enable = true needs parallelism.expert_parallel_degree = 1"),
            std::string::npos)
      << refusal(j);
}

TEST(FaultTolerance, MeshAfterLossKeepsWholeReplicasElsePlainFsdp) {
  const auto after = [](int64_t world, int64_t replicate, int64_t survivors) {
    const Mesh m = mesh_after_loss(Mesh::for_world(world, replicate), survivors);
    return std::to_string(m.replicate_degree()) + "x" + std::to_string(m.shard_degree());
  };
  EXPECT_EQ(after(4, 2, 3), "1x3");  // 2 x 2 minus one: no whole replica pair left
  EXPECT_EQ(after(4, 2, 2), "1x2");  // one replica's worth: plain FSDP
  EXPECT_EQ(after(6, 3, 5), "1x5");
  EXPECT_EQ(after(6, 3, 4), "2x2");  // two whole replicas' worth: HSDP again
  EXPECT_EQ(after(8, 4, 6), "3x2");
  EXPECT_EQ(after(4, 4, 3), "3x1");  // pure replication stays replication
  EXPECT_EQ(after(4, 1, 2), "1x2");  // plain FSDP stays plain
  EXPECT_THROW(mesh_after_loss(Mesh::for_world(4, 2), 0), SpecError);
  EXPECT_THROW(mesh_after_loss(Mesh::for_world(4, 2), 5), SpecError);
  const Mesh fsdp3 = Mesh::for_world(3, 1);
  FaultTolerance ft;
  ft.enable = true;
  EXPECT_EQ(ft.effective_redundancy(fsdp3), Redundancy::kBuddy);  // the mirror comes on after the shrink
  ft.redundancy = Redundancy::kNone;
  EXPECT_EQ(ft.effective_redundancy(fsdp3), Redundancy::kNone);
}

TEST(FaultTolerance, OffKeepsNoRedundancyAndAnyMesh) {
  JobSpec j = job(4, 2);
  j.fault_tolerance.enable = false;
  j.policy.redundancy = Redundancy::kNone;
  EXPECT_EQ(j.fault_tolerance.effective_redundancy(), Redundancy::kNone);
  EXPECT_EQ(refusal(j), "");
}

}  // namespace
}  // namespace fsdp::spec
