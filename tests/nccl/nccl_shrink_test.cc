// ncclCommShrink over ncclCommInitAll jobs (ranks of one process driven from one thread in groups): the
// survivors renumbered in order and reducing alone, the parent after NCCL_SHRINK_DEFAULT (usable by
// every rank) and after NCCL_SHRINK_ABORT (broken), and the arguments refused. Killed ranks and
// ncclCommGetAsyncError are nccl_shrink_check.c's (processes).
#include <gtest/gtest.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "tests/nccl/init_all_job.h"

namespace {

using fsdp::testing::Job;

bool says(ncclComm_t c, const std::string& needle) {
  return std::string(ncclGetLastError(c)).find(needle) != std::string::npos;
}

TEST(NcclShrink, SurvivorsAreRenumberedInOrderAndReduceAlone) {
  Job job(5);
  const int excluded[2] = {3, 1};
  const int survivors[3] = {0, 2, 4};
  std::vector<ncclComm_t> child(5, nullptr);
  for (int r : survivors) {
    ASSERT_NCCL(ncclCommShrink(job[r], const_cast<int*>(excluded), 2, &child[r], nullptr, NCCL_SHRINK_DEFAULT));
  }
  for (int i = 0; i < 3; ++i) {
    int n = 0, me = -1;
    ASSERT_NCCL(ncclCommCount(child[survivors[i]], &n));
    ASSERT_NCCL(ncclCommUserRank(child[survivors[i]], &me));
    EXPECT_EQ(n, 3);
    EXPECT_EQ(me, i);
  }
  // Values unique to rank and index, so a block one slot off fails.
  constexpr int kCount = 257;
  std::vector<std::vector<int>> send(3, std::vector<int>(kCount)), sum(3, std::vector<int>(kCount));
  std::vector<std::vector<int>> gathered(3, std::vector<int>(3 * kCount));
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < kCount; ++k) send[i][k] = 1000 * (i + 1) + k;
  }
  // The parent still serves all five ranks (NCCL_SHRINK_DEFAULT leaves it as it was), concurrently.
  int in[5] = {1, 10, 100, 1000, 10000}, all[5] = {};
  ASSERT_NCCL(ncclGroupStart());
  for (int i = 0; i < 3; ++i) {
    ncclComm_t c = child[survivors[i]];
    ASSERT_NCCL(ncclAllReduce(send[i].data(), sum[i].data(), kCount, ncclInt32, ncclSum, c, nullptr));
    ASSERT_NCCL(ncclAllGather(send[i].data(), gathered[i].data(), kCount, ncclInt32, c, nullptr));
  }
  for (int r = 0; r < 5; ++r) ASSERT_NCCL(ncclAllReduce(&in[r], &all[r], 1, ncclInt32, ncclSum, job[r], nullptr));
  ASSERT_NCCL(ncclGroupEnd());
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < kCount; ++k) {
      ASSERT_EQ(sum[i][k], 6000 + 3 * k) << "rank " << i << " element " << k;
      for (int j = 0; j < 3; ++j) ASSERT_EQ(gathered[i][j * kCount + k], send[j][k]) << i << " " << j << " " << k;
    }
  }
  for (int r = 0; r < 5; ++r) EXPECT_EQ(all[r], 11111);
  for (ncclComm_t c : child) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(NcclShrink, AbortFlagBreaksTheParentNotTheChild) {
  Job job(2);
  int excluded = 1;
  ncclComm_t child = nullptr;
  ASSERT_NCCL(ncclCommShrink(job[0], &excluded, 1, &child, nullptr, NCCL_SHRINK_ABORT));
  float x = 3;
  ASSERT_NCCL(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, child, nullptr));
  EXPECT_EQ(x, 3);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, job[0], nullptr), ncclInvalidUsage);
  EXPECT_TRUE(says(job[0], "NCCL_SHRINK_ABORT")) << ncclGetLastError(job[0]);
  ncclResult_t async = ncclSuccess;
  ASSERT_NCCL(ncclCommGetAsyncError(job[0], &async));
  EXPECT_EQ(async, ncclInvalidUsage);
  ASSERT_NCCL(ncclCommGetAsyncError(child, &async));
  EXPECT_EQ(async, ncclSuccess);
  // A broken parent may still be shrunk: that is how one recovers.
  ncclComm_t again = nullptr;
  ASSERT_NCCL(ncclCommShrink(job[0], &excluded, 1, &again, nullptr, NCCL_SHRINK_DEFAULT));
  EXPECT_EQ(ncclCommDestroy(again), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
}

TEST(NcclShrink, BadArgumentsAreInvalidArgumentWithText) {
  Job job(3);
  ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
  struct Case {
    std::vector<int> excluded;
    const char* text;
  };
  const Case cases[] = {
      {{3}, "excluded rank 3 (entry 0) is outside [0, 3)"},
      {{1, -1}, "excluded rank -1 (entry 1) is outside [0, 3)"},
      {{2, 1, 2}, "excluded rank 2 (entry 2) is listed twice"},
      {{0}, "the calling rank is excluded"},
      {{2, 0, 1}, "every rank is excluded"},
  };
  for (const Case& c : cases) {
    std::vector<int> list = c.excluded;
    EXPECT_EQ(ncclCommShrink(job[0], list.data(), static_cast<int>(list.size()), &child, nullptr, NCCL_SHRINK_DEFAULT),
              ncclInvalidArgument);
    EXPECT_EQ(child, nullptr);
    EXPECT_TRUE(says(job[0], c.text)) << ncclGetLastError(job[0]);
    EXPECT_TRUE(says(job[0], "ncclCommShrink on rank 0 of 3")) << ncclGetLastError(job[0]);
  }
  int one = 1;
  EXPECT_EQ(ncclCommShrink(job[0], nullptr, 1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_TRUE(says(job[0], "excludeRanksList is NULL")) << ncclGetLastError(job[0]);
  EXPECT_EQ(ncclCommShrink(job[0], &one, -1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(job[0], &one, 1, nullptr, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(job[0], &one, 1, &child, nullptr, 2), ncclInvalidArgument);
  EXPECT_TRUE(says(job[0], "shrinkFlags 2")) << ncclGetLastError(job[0]);
  EXPECT_EQ(ncclCommShrink(nullptr, &one, 1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  // Nothing was sent and nothing broke: the job still reduces.
  int in[3] = {1, 2, 4}, out[3] = {};
  ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < 3; ++r) ASSERT_NCCL(ncclAllReduce(&in[r], &out[r], 1, ncclInt32, ncclSum, job[r], nullptr));
  ASSERT_NCCL(ncclGroupEnd());
  for (int r = 0; r < 3; ++r) EXPECT_EQ(out[r], 7);
  // No exclusion at all is a copy of the communicator.
  ASSERT_NCCL(ncclCommShrink(job[1], nullptr, 0, &child, nullptr, NCCL_SHRINK_DEFAULT));
  int n = 0;
  ASSERT_NCCL(ncclCommCount(child, &n));
  EXPECT_EQ(n, 3);
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
}

}  // namespace
