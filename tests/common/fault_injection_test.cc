// FSDP_FAULT_KILL_AFTER_STEP's one parser (common/fault_injection.h): the entries naming this rank armed,
// every WHEN word understood, a malformed entry refused naming the variable, nothing armed on a restart.
#include "common/fault_injection.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "tests/common/scoped_env.h"

namespace fsdp::fault {
namespace {

using testing::ScopedEnv;

TEST(FaultInjection, ArmsTheEntriesOfThisRankOnly) {
  ScopedEnv spec("FSDP_FAULT_KILL_AFTER_STEP", "1:3,2:4:in_mirror,1:6:in_checkpoint,0:2:stop");
  ScopedEnv first("FSDP_RESTART_COUNT", "0");
  arm(1);
  EXPECT_TRUE(armed());
  EXPECT_TRUE(due(When::kAfterStep, 3));
  EXPECT_TRUE(due(When::kInCheckpoint, 6));
  EXPECT_FALSE(due(When::kInMirror, 4));  // rank 2's
  EXPECT_FALSE(due(When::kStop, 2));      // rank 0's
  EXPECT_FALSE(due(When::kAfterStep, 4));
  EXPECT_FALSE(due(When::kInCheckpoint, 3));
  point(When::kInForward, 3);  // not due: returns
  arm(3);
  EXPECT_FALSE(armed());
  ScopedEnv restarted("FSDP_RESTART_COUNT", "1");  // a restarted job runs undisturbed
  arm(1);
  EXPECT_FALSE(armed());
  EXPECT_FALSE(due(When::kAfterStep, 3));
}

TEST(FaultInjection, EveryWordNamesItsPoint) {
  const When all[] = {When::kAfterStep,    When::kStop,       When::kBeforeVote,  When::kAfterVote,
                      When::kInForward,    When::kInBackward, When::kInOptimizer, When::kInMirror,
                      When::kInCheckpoint, When::kInRecovery, When::kInGrow};
  for (When w : all) {
    const std::string text = "0:5:" + std::string(name(w));
    ScopedEnv spec("FSDP_FAULT_KILL_AFTER_STEP", text.c_str());
    arm(0);
    EXPECT_TRUE(due(w, 5)) << name(w);
  }
  EXPECT_EQ(name(When::kInRecovery), "in_recovery");
  EXPECT_EQ(name(When::kInGrow), "in_grow");
  disarm();
}

TEST(FaultInjection, AMalformedEntryIsRefusedNamingTheVariable) {
  for (const char* bad : {"1", "1:0", "x:3", "1:3:in_nowhere", "1:3,", "1:3:after:x", "-1:3"}) {
    ScopedEnv spec("FSDP_FAULT_KILL_AFTER_STEP", bad);
    try {
      arm(1);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("FSDP_FAULT_KILL_AFTER_STEP='"), std::string::npos) << what;
      EXPECT_NE(what.find("in_checkpoint"), std::string::npos) << what;  // the words it accepts
    }
  }
  disarm();
}

}  // namespace
}  // namespace fsdp::fault
