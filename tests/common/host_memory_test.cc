// The memory a CPU job is measured against: physical memory lowered by the cgroup's limit, v2 or v1,
// the process's own cgroup before the mount's top, the smaller limit winning.
#include "common/host_memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fsdp {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kGiB = int64_t{1} << 30;

class HostMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("host_memory_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  MemoryLimit limit(int64_t physical) { return host_memory_limit(root_.string(), physical); }
  fs::path root_;
};

TEST_F(HostMemoryTest, PhysicalMemoryWithoutACgroupLimit) {
  const MemoryLimit m = limit(16 * kGiB);
  EXPECT_EQ(m.bytes, 16 * kGiB);
  EXPECT_EQ(m.source, "physical memory");
  EXPECT_EQ(m.describe(), "16.0 GiB (physical memory)");
  write("sys/fs/cgroup/memory.max", "max\n");                                    // v2's "no limit"
  write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's
  EXPECT_EQ(limit(16 * kGiB).source, "physical memory");
}

TEST_F(HostMemoryTest, TheCgroupLimitWhenSmaller) {
  write("proc/self/cgroup", "0::/job.slice\n");
  write("sys/fs/cgroup/memory.max", std::to_string(8 * kGiB) + "\n");
  EXPECT_EQ(limit(16 * kGiB).bytes, 8 * kGiB);  // the mount's top: a container's own cgroup
  write("sys/fs/cgroup/job.slice/memory.max", std::to_string(2 * kGiB) + "\n");
  const MemoryLimit v2 = limit(16 * kGiB);
  EXPECT_EQ(v2.bytes, 2 * kGiB);  // the process's own cgroup first
  EXPECT_EQ(v2.source, "cgroup v2 memory.max");
  EXPECT_EQ(limit(1 * kGiB).source, "physical memory");  // a limit above the memory there is is none
}

TEST_F(HostMemoryTest, CgroupV1AndTheSmallerOfBoth) {
  write("proc/self/cgroup", "5:cpu,cpuacct:/a\n4:memory:/docker/abc\n");
  write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", std::to_string(3 * kGiB) + "\n");
  MemoryLimit m = limit(16 * kGiB);
  EXPECT_EQ(m.bytes, 3 * kGiB);
  EXPECT_EQ(m.source, "cgroup v1 memory.limit_in_bytes");
  write("sys/fs/cgroup/memory.max", std::to_string(4 * kGiB) + "\n");
  EXPECT_EQ(limit(16 * kGiB).bytes, 3 * kGiB);
  write("sys/fs/cgroup/memory.max", std::to_string(kGiB) + "\n");
  m = limit(16 * kGiB);
  EXPECT_EQ(m.bytes, kGiB);
  EXPECT_EQ(m.source, "cgroup v2 memory.max");
}

TEST(HostMemory, ThisHostHasSomeMemory) { EXPECT_GT(host_memory_limit().bytes, 0); }

}  // namespace
}  // namespace fsdp
