// Our nccl.h against NVIDIA's: every enum value, constant, struct layout, initializer and function
// type in facts.inc must agree, so code compiled against either header runs against either library.
#include <gtest/gtest.h>

#include <map>
#include <string>

std::map<std::string, std::string> our_facts();
std::map<std::string, std::string> nvidia_facts();

TEST(HeaderCompat, MatchesNvidiaNcclHeader) {
  const auto ours = our_facts();
  const auto theirs = nvidia_facts();
  ASSERT_GT(ours.size(), 100u);
  ASSERT_EQ(ours.size(), theirs.size());
  for (const auto& [name, value] : ours) {
    auto it = theirs.find(name);
    ASSERT_NE(it, theirs.end()) << name;
    EXPECT_EQ(value, it->second) << name;
  }
}
