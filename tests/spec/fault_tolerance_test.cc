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
  EXPECT_NE(refusal(job(4, 2)).find("needs plain FSDP"), std::string::npos) << refusal(job(4, 2));
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
