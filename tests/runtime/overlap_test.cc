// The overlap meter (runtime/overlap.h): the share of each kind of collective's flight time that fell
// inside compute spans, with every all-gather (forward, backward) counted as one kind.
#include "runtime/overlap.h"

#include <gtest/gtest.h>

namespace fsdp::runtime {
namespace {

using std::chrono::milliseconds;

TEST(OverlapMeter, HiddenIsTheFlightTimeInsideComputeSpans) {
  OverlapMeter m;
  const OverlapMeter::TimePoint t0{};
  m.compute(t0, t0 + milliseconds(10));
  m.compute(t0 + milliseconds(20), t0 + milliseconds(30));
  // 5 ms inside the first span, 5 outside, 5 inside the second: 10 of 15 hidden.
  m.communication(CollectiveKind::kReduceScatter, t0 + milliseconds(5), t0 + milliseconds(25));
  const auto shares = m.shares();
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_DOUBLE_EQ(shares.at("reduce_scatter").seconds, 0.020);
  EXPECT_DOUBLE_EQ(shares.at("reduce_scatter").hidden_seconds, 0.010);
  m.clear();
  EXPECT_TRUE(m.shares().empty());
}

TEST(OverlapMeter, EveryAllGatherNameIsOneKind) {
  OverlapMeter m;
  const OverlapMeter::TimePoint t0{};
  m.compute(t0, t0 + milliseconds(10));
  m.communication(CollectiveKind::kAllGather, t0, t0 + milliseconds(4));                 // forward: hidden
  m.communication(CollectiveKind::kAllGather, t0 + milliseconds(10), t0 + milliseconds(14));  // exposed
  m.communication(CollectiveKind::kAllReduce, t0, t0 + milliseconds(2));
  const auto shares = m.shares();
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_DOUBLE_EQ(shares.at("all_gather").seconds, 0.008);
  EXPECT_DOUBLE_EQ(shares.at("all_gather").hidden_fraction(), 0.5);
  EXPECT_DOUBLE_EQ(shares.at("all_reduce").hidden_fraction(), 1.0);
}

}  // namespace
}  // namespace fsdp::runtime
