// CRC32C (common/crc32c.h), the checksum of checkpoint chunks and metadata: known vectors, and extending a
// running value equals one pass over the whole.
#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace fsdp {
namespace {

TEST(CheckpointCrc32c, KnownVectorsAndExtension) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  const std::string s = "the quick brown fox jumps over the lazy dog, twice over";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(crc32c_extend(crc32c(s.data(), cut), s.data() + cut, s.size() - cut), crc32c(s.data(), s.size()));
  }
}

}  // namespace
}  // namespace fsdp
