// What the gtest suites of the C API share: a job of ncclCommInitAll ranks, and the check of a call.
#pragma once

#include <gtest/gtest.h>
#include <nccl.h>

#include <vector>

#define ASSERT_NCCL(call) ASSERT_EQ((call), ncclSuccess) << #call << ": " << ncclGetLastError(nullptr)

namespace fsdp::testing {

// n in-process ranks; destroyed at the end of the test.
struct Job {
  std::vector<ncclComm_t> comms;
  explicit Job(int n) : comms(n, nullptr) {
    EXPECT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  }
  ~Job() {
    for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess) << ncclGetLastError(c);
  }
  int size() const { return static_cast<int>(comms.size()); }
  ncclComm_t operator[](int r) const { return comms[r]; }
};

}  // namespace fsdp::testing
