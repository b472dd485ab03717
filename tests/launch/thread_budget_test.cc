// The thread budget: cores shared among a host's ranks, at least one each, a user's choice kept.
#include "launch/thread_budget.h"

#include <gtest/gtest.h>

namespace fsdp::launch {
namespace {

TEST(ThreadBudget, SharesTheCoresAmongLocalRanks) {
  EXPECT_EQ(decide_thread_budget(2, 1, false).threads, 2);
  EXPECT_EQ(decide_thread_budget(2, 2, false).threads, 1);
  EXPECT_EQ(decide_thread_budget(16, 4, false).threads, 4);
  EXPECT_EQ(decide_thread_budget(7, 2, false).threads, 3);  // rounded down: never more threads than cores
}

TEST(ThreadBudget, AtLeastOneThread) {
  EXPECT_EQ(decide_thread_budget(2, 4, false).threads, 1);
  EXPECT_EQ(decide_thread_budget(1, 0, false).threads, 1);  // an unknown local size counts as one rank
}

TEST(ThreadBudget, ChildEnvironmentCarriesBothVariables) {
  const ThreadBudget b = decide_thread_budget(8, 2, false);
  EXPECT_FALSE(b.from_user);
  EXPECT_EQ(thread_budget_env(b), (std::vector<std::string>{"OPENBLAS_NUM_THREADS=4", "OMP_NUM_THREADS=4"}));
  EXPECT_NE(b.describe.find("4 BLAS/OpenMP thread(s) per rank: 8 core(s) for 2 local rank(s)"), std::string::npos)
      << b.describe;
}

TEST(ThreadBudget, UserChoiceIsLeftAlone) {
  const ThreadBudget b = decide_thread_budget(8, 2, true);
  EXPECT_TRUE(b.from_user);
  EXPECT_TRUE(thread_budget_env(b).empty());
  EXPECT_NE(b.describe.find("set by the user"), std::string::npos) << b.describe;
}

TEST(ThreadBudget, AvailableCoresIsPositive) { EXPECT_GE(available_cores(), 1); }

}  // namespace
}  // namespace fsdp::launch
