// The block cache behind TrackedBuffer: a released block is handed out again for the same size, so a
// repeated pattern of allocations reaches a steady state with no system allocations; reserved vs
// allocated bytes are reported apart; FSDP_CACHING_ALLOCATOR=0 hands every block back at once.
#include "common/block_cache.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "common/memory_tracker.h"

namespace fsdp {
namespace {

TEST(BlockCache, ReleasedBlockIsReusedForTheSameSize) {
  BlockCache cache(true);
  void* a = cache.allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  cache.release(a, 1000);
  EXPECT_EQ(cache.stats().cached_bytes, 1024);
  void* b = cache.allocate(1000);
  EXPECT_EQ(a, b);
  const BlockCacheStats s = cache.stats();
  EXPECT_EQ(s.system_allocations, 1);
  EXPECT_EQ(s.system_frees, 0);
  EXPECT_EQ(s.reserved_bytes, 1024);
  EXPECT_EQ(s.cached_bytes, 0);
  cache.release(b, 1000);
}

TEST(BlockCache, RepeatedPatternReachesASteadyState) {
  BlockCache cache(true);
  auto step = [&] {  // a unit's life: two buffers live together, one after both, then a scratch
    void* gather = cache.allocate(3 << 20);
    void* params = cache.allocate(2 << 20);
    cache.release(gather, 3 << 20);
    void* grads = cache.allocate(2 << 20);
    void* scratch = cache.allocate(100);
    cache.release(scratch, 100);
    cache.release(params, 2 << 20);
    cache.release(grads, 2 << 20);
  };
  step();
  const BlockCacheStats warm = cache.stats();
  for (int i = 0; i < 5; ++i) step();
  const BlockCacheStats after = cache.stats();
  EXPECT_EQ(after.system_allocations, warm.system_allocations);
  EXPECT_EQ(after.system_frees, 0);
  EXPECT_EQ(after.reserved_bytes, (3 << 20) + 2 * (2 << 20) + 128);
  EXPECT_EQ(after.peak_reserved_bytes, after.reserved_bytes);
  cache.empty();
  EXPECT_EQ(cache.stats().reserved_bytes, 0);
  EXPECT_EQ(cache.stats().system_frees, after.system_allocations);
}

TEST(BlockCache, WithoutCachingEveryBlockGoesBack) {
  BlockCache cache(false);
  for (int i = 0; i < 3; ++i) cache.release(cache.allocate(4096), 4096);
  const BlockCacheStats s = cache.stats();
  EXPECT_EQ(s.system_allocations, 3);
  EXPECT_EQ(s.system_frees, 3);
  EXPECT_EQ(s.reserved_bytes, 0);
}

// The tracker counts allocated bytes by category as before; the cache's reserved bytes stay apart.
TEST(BlockCache, TrackerCountsAllocatedAndCacheReserved) {
  MemoryTracker tracker;
  {
    TrackedBuffer<float> a(tracker, MemoryCategory::kActivations, 100);
    for (float& x : a) x = 7.f;
  }
  TrackedBuffer<float> b(tracker, MemoryCategory::kActivations, 100);  // the same block, zeroed again
  for (float x : b) ASSERT_EQ(x, 0.f);
  EXPECT_EQ(tracker.current_total(), 400);
  EXPECT_EQ(tracker.peak_total(), 400);
  if (tracker.cache().caching()) {
    EXPECT_EQ(tracker.cache().stats().system_allocations, 1);
    EXPECT_EQ(tracker.cache().stats().reserved_bytes, 448);
  }
}

}  // namespace
}  // namespace fsdp
