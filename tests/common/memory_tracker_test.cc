// MemoryTracker and TrackedBuffer (common/memory_tracker.h): bytes counted per category, current and peak.
#include "common/memory_tracker.h"

#include <gtest/gtest.h>

#include <utility>

namespace fsdp {
namespace {

TEST(MemoryTracker, CountsCurrentAndPeakPerCategory) {
  MemoryTracker t;
  {
    TrackedBuffer<float> a(t, MemoryCategory::kParamShards, 100);
    TrackedBuffer<double> b(t, MemoryCategory::kAllGather, 10);
    EXPECT_EQ(t.current(MemoryCategory::kParamShards), 400);
    EXPECT_EQ(t.current_total(), 480);
    TrackedBuffer<float> c = std::move(a);
    EXPECT_EQ(t.current_total(), 480);
    EXPECT_TRUE(a.empty());
    b.release();
    EXPECT_EQ(t.current_total(), 400);
    for (float v : c) EXPECT_EQ(v, 0.f);
  }
  EXPECT_EQ(t.current_total(), 0);
  EXPECT_EQ(t.peak_total(), 480);
  EXPECT_EQ(t.peak(MemoryCategory::kAllGather), 80);
  t.reset_peaks();
  EXPECT_EQ(t.peak_total(), 0);
}

}  // namespace
}  // namespace fsdp
