// Job ids: 16 lowercase hex digits, never the same twice.
#include "launch/job_id.h"

#include <gtest/gtest.h>

#include <set>

namespace fsdp::launch {
namespace {

TEST(JobId, SixteenLowercaseHexDigits) {
  const std::string id = random_job_id();
  ASSERT_EQ(id.size(), 16u) << id;
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
}

TEST(JobId, NeverRepeats) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(random_job_id()).second);
}

}  // namespace
}  // namespace fsdp::launch
