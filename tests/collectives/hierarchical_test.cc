// The hierarchical all-gather, reduce-scatter and all-reduce on hosts x local-ranks layouts: even,
// uneven, interleaved in rank order and one rank per host, at sizes that span many chunks, against
// the reference; the default choice once ranks span hosts; the layout carried into split communicators.
#include <gtest/gtest.h>

#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

struct Layout {
  const char* name;
  std::vector<int> host_of;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> kLayouts = {
      {"two_hosts_of_two", {0, 0, 1, 1}},
      {"three_plus_one", {0, 0, 0, 1}},
      {"interleaved_uneven", {0, 1, 0, 1, 2, 0, 2}},
      {"one_rank_per_host", {0, 1, 2, 3, 4}},
      {"two_by_four_round_robin", {0, 1, 0, 1, 0, 1, 0, 1}},
  };
  return kLayouts;
}

CommOptions options(const std::string& forced = "") {
  CommOptions o;
  o.timeout = std::chrono::seconds(60);
  o.chunk_bytes = 64 << 10;
  o.algorithms = forced;
  return o;
}

class Hierarchical : public ::testing::TestWithParam<Layout> {};

TEST_P(Hierarchical, MatchesTheReferenceByDefault) {
  const Layout& layout = GetParam();
  const int n = static_cast<int>(layout.host_of.size());
  InProcJob job(n, options());
  for (int r = 0; r < n; ++r) job.comm(r).set_host_layout(layout.host_of);
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt32}) {
    for (size_t count : {size_t{1}, size_t{4097}, size_t{100003}}) {
      SCOPED_TRACE(std::string(name(t)) + " count " + std::to_string(count));
      std::vector<std::vector<std::byte>> ag_in, rs_in;
      std::vector<std::byte> ag_want;
      for (int r = 0; r < n; ++r) {
        ag_in.push_back(make_input(t, ReduceKind::kSum, r, count));
        ag_want.insert(ag_want.end(), ag_in.back().begin(), ag_in.back().end());
        rs_in.push_back(make_input(t, ReduceKind::kSum, r, count * n, 1));
      }
      const auto rs_want = reference_reduce(t, ReduceOp::sum(), rs_in, count * n);
      const size_t block = count * element_size(t);
      job.run([&](Communicator& c) {
        const int r = c.rank();
        const bool multi_host = c.host_count() > 1;
        if (multi_host && block * n >= c.options().small_message_bytes) {
          EXPECT_EQ(c.algorithm_for(CollectiveKind::kAllGather, block * n), "hierarchical");
        }
        std::vector<std::byte> out(block * n);
        c.all_gather(ag_in[r].data(), out.data(), count, t).wait();
        std::string diff = compare(out.data(), ag_want.data(), count * n, t);
        if (!diff.empty()) ADD_FAILURE() << "all_gather rank " << r << ": " << diff;

        std::vector<std::byte> mine(block);
        c.reduce_scatter(rs_in[r].data(), mine.data(), count, t, ReduceOp::sum()).wait();
        diff = compare(mine.data(), rs_want.data() + r * block, count, t, r * count);
        if (!diff.empty()) ADD_FAILURE() << "reduce_scatter rank " << r << ": " << diff;

        std::vector<std::byte> inplace = rs_in[r];  // in place, the whole buffer
        c.all_reduce(inplace.data(), inplace.data(), count * n, t, ReduceOp::sum()).wait();
        diff = compare(inplace.data(), rs_want.data(), count * n, t);
        if (!diff.empty()) ADD_FAILURE() << "all_reduce rank " << r << ": " << diff;
      });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hierarchical, ::testing::ValuesIn(layouts()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(HierarchicalChoice, FlatUntilALayoutSpansHostsAndForcedRingStaysFlat) {
  InProcJob job(4, options());
  job.run([](Communicator& c) {
    EXPECT_EQ(c.host_count(), 1);
    EXPECT_EQ(c.algorithm_for(CollectiveKind::kAllGather, 1 << 20), "ring");
    EXPECT_EQ(c.algorithm_for(CollectiveKind::kAllGather, 64), "bruck");
  });
  for (int r = 0; r < 4; ++r) job.comm(r).set_host_layout({7, 7, 9, 9});
  job.run([](Communicator& c) {
    EXPECT_EQ(c.host_count(), 2);
    EXPECT_EQ(c.local_size(), 2);
    EXPECT_EQ(c.local_rank(), c.rank() % 2);
    EXPECT_EQ(c.host_of(3), 1);
    EXPECT_EQ(c.algorithm_for(CollectiveKind::kReduceScatter, 1 << 20), "hierarchical");
    // Small messages stay latency-bound.
    EXPECT_EQ(c.algorithm_for(CollectiveKind::kAllReduce, 64), "recursive_doubling");
    EXPECT_EQ(c.algorithm_for(CollectiveKind::kBroadcast, 1 << 20), "scatter_allgather");
  });
  InProcJob forced(4, options("all_gather=ring"));
  for (int r = 0; r < 4; ++r) forced.comm(r).set_host_layout({0, 0, 1, 1});
  forced.run([](Communicator& c) { EXPECT_EQ(c.algorithm_for(CollectiveKind::kAllGather, 1 << 20), "ring"); });
  EXPECT_THROW(job.comm(0).set_host_layout({0, 1}), InvalidArgument);
}

// Split by local rank: each child holds one rank per host; by host: one host each.
TEST(HierarchicalChoice, SplitCarriesTheLayout) {
  InProcJob job(6, options());
  for (int r = 0; r < 6; ++r) job.comm(r).set_host_layout({0, 0, 0, 1, 1, 1});
  job.run([](Communicator& c) {
    auto across = c.split(c.local_rank(), c.rank());
    EXPECT_EQ(across->size(), 2);
    EXPECT_EQ(across->host_count(), 2);
    EXPECT_EQ(across->local_size(), 1);
    auto within = c.split(c.host_of(c.rank()), c.rank());
    EXPECT_EQ(within->host_count(), 1);
    EXPECT_EQ(within->local_size(), 3);
    std::vector<float> v(100000, static_cast<float>(c.rank() + 1)), all(200000);
    across->all_gather(v.data(), all.data(), v.size(), DataType::kFloat32).wait();
    EXPECT_EQ(all[0], static_cast<float>(c.local_rank() + 1));
    EXPECT_EQ(all[199999], static_cast<float>(c.local_rank() + 4));
  });
}

}  // namespace
}  // namespace fsdp::testing
