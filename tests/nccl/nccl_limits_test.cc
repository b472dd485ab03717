// The C API's limits at their edges, through the public header only: ncclMemAlloc sizes from 0 to
// SIZE_MAX (refused ones are refused before anything is allocated, so the test stays fast and small)
// and ncclCommInitAll rank counts around its bound.
#include <gtest/gtest.h>
#include <nccl.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

size_t page() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

// Physical memory plus swap, as the library counts what this host can back (SIZE_MAX past it).
size_t backing_bytes() {
  struct sysinfo info {};
  EXPECT_EQ(::sysinfo(&info), 0);
  size_t units = 0, bytes = 0;
  if (__builtin_add_overflow(info.totalram, info.totalswap, &units) ||
      __builtin_mul_overflow(units, size_t{info.mem_unit}, &bytes)) {
    return SIZE_MAX;
  }
  return bytes;
}

std::string last_error() { return ncclGetLastError(nullptr); }

// Sizes a page or less, and a page: a usable, page-aligned allocation every byte of which is writable.
TEST(NcclMemAlloc, SmallSizesAreWholePages) {
  for (size_t size : {size_t{0}, size_t{1}, page() - 1, page(), page() + 1}) {
    void* p = nullptr;
    ASSERT_EQ(ncclMemAlloc(&p, size), ncclSuccess) << size << ": " << last_error();
    ASSERT_NE(p, nullptr) << size;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % page(), 0u) << size;
    if (size > 0) std::memset(p, 0x5a, size);
    EXPECT_EQ(ncclMemFree(p), ncclSuccess) << size << ": " << last_error();
  }
}

// Sizes whose page rounding wraps (SIZE_MAX used to come back as one page) or passes what a file can
// hold: ncclInvalidArgument naming the size, and *ptr NULL.
TEST(NcclMemAlloc, SizesNoFileCanHoldAreInvalid) {
  const size_t off_t_max = static_cast<size_t>(INT64_MAX);
  for (size_t size : {SIZE_MAX, SIZE_MAX - 4000, SIZE_MAX - page() + 1, off_t_max, off_t_max - page() + 2}) {
    void* p = reinterpret_cast<void*>(1);
    EXPECT_EQ(ncclMemAlloc(&p, size), ncclInvalidArgument) << size;
    EXPECT_EQ(p, nullptr) << size;
    const std::string why = last_error();
    EXPECT_NE(why.find("ncclMemAlloc"), std::string::npos) << why;
    EXPECT_NE(why.find(std::to_string(size)), std::string::npos) << why;
    EXPECT_NE(why.find("more than a file can hold"), std::string::npos) << why;
  }
}

// Sizes a file holds but this host cannot back (16 TiB, used to run for minutes; one page more than
// memory plus swap): ncclSystemError at once, saying so.
TEST(NcclMemAlloc, SizesBeyondMemoryAndSwapAreRefusedAtOnce) {
  const size_t backing = backing_bytes();
  ASSERT_LT(backing, static_cast<size_t>(INT64_MAX) / 2) << "a host this large backs every file size";
  std::vector<size_t> sizes{(backing / page() + 1) * page()};
  if (backing < size_t{1} << 44) sizes.push_back(size_t{1} << 44);
  sizes.push_back(static_cast<size_t>(INT64_MAX) - page() + 1);  // the largest whole-page file
  for (size_t size : sizes) {
    void* p = reinterpret_cast<void*>(1);
    EXPECT_EQ(ncclMemAlloc(&p, size), ncclSystemError) << size;
    EXPECT_EQ(p, nullptr) << size;
    const std::string why = last_error();
    EXPECT_NE(why.find(std::to_string(size)), std::string::npos) << why;
    EXPECT_NE(why.find("physical memory and swap"), std::string::npos) << why;
  }
}

// ncclCommInitAll takes up to 1024 ranks (one process, one progress thread); 1025 and INT_MAX are
// refused at once naming the bound, with nothing created.
TEST(NcclCommInitAll, RankCountIsBounded) {
  for (int n : {1025, 1 << 20, INT32_MAX}) {
    ncclComm_t one = nullptr;
    EXPECT_EQ(ncclCommInitAll(&one, n, nullptr), ncclInvalidArgument) << n;
    const std::string why = last_error();
    EXPECT_NE(why.find("ndev " + std::to_string(n) + " is more than the 1024 ranks"), std::string::npos) << why;
    EXPECT_EQ(one, nullptr) << n;
  }
  std::vector<ncclComm_t> comms(1024, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 1024, nullptr), ncclSuccess) << last_error();
  int count = 0;
  EXPECT_EQ(ncclCommCount(comms[1023], &count), ncclSuccess);
  EXPECT_EQ(count, 1024);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

}  // namespace
