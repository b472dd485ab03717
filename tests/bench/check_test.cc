// The result check of fsdp-bench (-c): inputs prepared by prepare_check, combined by a naive
// in-process reference of each collective, must count zero wrong elements on every rank; one
// corrupted element must count one, and a misplaced block must count its elements.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "bench/fsdp_bench/data_check.h"
#include "bench/fsdp_bench/peer_reduce.h"

namespace fsdp::bench {
namespace {

struct RankBuffers {
  Geometry g;
  std::vector<std::byte> send, recv;
};

// Every rank's inputs as prepare_check leaves them (out of place), and results from a naive reference.
std::vector<RankBuffers> run_naive(const Case& c, size_t bytes, int n) {
  const size_t elem = element_size(c.type);
  std::vector<RankBuffers> ranks(n);
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = ranks[r];
    b.g = geometry(c.collective, bytes, elem, n, r);
    b.send.resize(b.g.send_count * elem);
    b.recv.resize(b.g.recv_count * elem);
    prepare_check(c, b.g, r, n, false, b.send.data(), b.recv.data());
  }
  const size_t block = ranks[0].g.param_count * elem;
  auto fold = [&](std::byte* out, size_t offset, size_t len) {  // out = reduction of every rank's send[offset..]
    std::memcpy(out, ranks[0].send.data() + offset, len);
    const ReduceKind kind = c.op == ReduceKind::kAvg ? ReduceKind::kSum : c.op;
    for (int r = 1; r < n; ++r) reduce_elements(out, ranks[r].send.data() + offset, len / elem, c.type, kind);
    if (c.op == ReduceKind::kAvg) divide_elements(out, len / elem, c.type, n);
  };
  for (int r = 0; r < n; ++r) {
    std::byte* out = ranks[r].recv.data();
    const size_t len = ranks[r].recv.size();
    switch (c.collective) {
      case Collective::kAllGather:
        for (int b = 0; b < n; ++b) std::memcpy(out + b * block, ranks[b].send.data(), block);
        break;
      case Collective::kReduceScatter: fold(out, r * block, block); break;
      case Collective::kAllReduce: fold(out, 0, len); break;
      case Collective::kReduce:
        if (r == c.root) fold(out, 0, len);
        break;
      case Collective::kBroadcast: std::memcpy(out, ranks[c.root].send.data(), len); break;
      case Collective::kSendRecv: std::memcpy(out, ranks[(r - 1 + n) % n].send.data(), len); break;
      case Collective::kAllToAll:
        for (int p = 0; p < n; ++p) std::memcpy(out + p * block, ranks[p].send.data() + r * block, block);
        break;
    }
  }
  return ranks;
}

TEST(Check, NaiveReferenceIsRightForEveryCollectiveTypeAndOp) {
  const ReduceKind ops[] = {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax, ReduceKind::kMin, ReduceKind::kAvg};
  for (int n : {1, 2, 3, 5}) {
    for (Collective coll : all_collectives()) {
      for (int t = 0; t < kNumDataTypes; ++t) {
        for (ReduceKind op : ops) {
          if (!has_reduction(coll) && op != ReduceKind::kSum) continue;
          const Case c{coll, static_cast<DataType>(t), op, n - 1};
          auto ranks = run_naive(c, 600, n);
          for (int r = 0; r < n; ++r) {
            SCOPED_TRACE(std::string(name(coll)) + " " + std::string(name(c.type)) + " " + std::string(name(op)) +
                         " n=" + std::to_string(n) + " rank " + std::to_string(r));
            const size_t count = result_count(c, ranks[r].g, r);
            EXPECT_EQ(count_wrong(c, ranks[r].g, r, n, ranks[r].recv.data()), 0u);
            if (count == 0) continue;
            ranks[r].recv[ranks[r].recv.size() / 2] ^= std::byte{0x5a};  // one element off
            EXPECT_EQ(count_wrong(c, ranks[r].g, r, n, ranks[r].recv.data()), 1u);
          }
        }
      }
    }
  }
}

TEST(Check, MisplacedBlockIsCounted) {
  const Case c{Collective::kAllGather, DataType::kFloat32, ReduceKind::kSum, 0};
  auto ranks = run_naive(c, 4096, 2);
  std::vector<std::byte>& out = ranks[0].recv;
  std::vector<std::byte> swapped(out.size());
  const size_t half = out.size() / 2;
  std::memcpy(swapped.data(), out.data() + half, half);
  std::memcpy(swapped.data() + half, out.data(), half);
  EXPECT_EQ(count_wrong(c, ranks[0].g, 0, 2, swapped.data()), 1024u);
}

TEST(Check, InPlaceLayoutsKeepTheRanksOwnData) {
  // All-gather in place: the rank's block inside recv is its input; the rest is poisoned.
  const Case c{Collective::kAllGather, DataType::kInt32, ReduceKind::kSum, 0};
  const Geometry g = geometry(c.collective, 64, 4, 2, 1);
  std::vector<std::byte> recv(g.recv_count * 4);
  prepare_check(c, g, 1, 2, true, recv.data() + g.in_place_offset * 4, recv.data());
  EXPECT_EQ(count_wrong(c, g, 1, 2, recv.data()), g.param_count);  // rank 0's block missing
}

TEST(Check, GeometryFollowsNcclTests) {
  const Geometry ag = geometry(Collective::kAllGather, 1000, 4, 3, 2);
  EXPECT_EQ(ag.count, 249u);  // 250 elements rounded down to a multiple of 3
  EXPECT_EQ(ag.param_count, 83u);
  EXPECT_EQ(ag.send_count, 83u);
  EXPECT_EQ(ag.in_place_offset, 166u);
  const Geometry rs = geometry(Collective::kReduceScatter, 1000, 4, 3, 1);
  EXPECT_EQ(rs.send_count, 249u);
  EXPECT_EQ(rs.recv_count, 83u);
  EXPECT_FALSE(rs.in_place_in_recv);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kBroadcast, 4), 1.0);
}

}  // namespace
}  // namespace fsdp::bench
