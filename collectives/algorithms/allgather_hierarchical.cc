// Hierarchical all-gather for ranks spread over hosts (host_layout.h has the slices and rails).
//   1. intra-host: every rank sends the part of its block in slice (h, l) to rail l of its host;
//   2. inter-host, along each rail: rail l of host h swaps slice (h, l) with rail l of every other host;
//   3. intra-host: rail l sends everything it holds (slice (*, l)) to every other rank of its host.
// Every byte lands straight in `buf` (no staging); the network carries 1/L of the buffer per rank
// instead of the flat ring's (n-1)/n, and the intra-host phases run over the fast local transport.
#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/host_layout.h"

namespace fsdp {
namespace {

constexpr int kToRail = 1, kAcrossHosts = 2, kFromRail = 3;

void post(Op& op, bool send, int peer, int phase, std::byte* buf, const Blocks& blocks,
          const std::vector<Piece>& pieces, std::vector<RequestPtr>& out) {
  size_t index = 0;
  for (const Piece& p : pieces) {
    std::byte* at = buf + blocks.offset(p.block) + p.offset;
    out.push_back(send ? op.send(peer, slot(phase, index), at, p.bytes) : op.recv(peer, slot(phase, index), at, p.bytes));
    ++index;
  }
}

// Slice (*, rail) over every host, in host order: what rail `rail` of any host holds after phase 2.
std::vector<Piece> rail_pieces(const HostLayout& layout, const Blocks& blocks, int rail) {
  std::vector<Piece> all;
  for (int h = 0; h < layout.hosts(); ++h) {
    const auto s = slice_pieces(layout, blocks, h, rail);
    all.insert(all.end(), s.begin(), s.end());
  }
  return all;
}

}  // namespace

Task allgather_hierarchical(Op& op, std::byte* buf, Blocks blocks, const HostLayout& layout) {
  const int me = op.rank();
  if (op.size() == 1 || blocks.total_bytes() == 0) co_return;
  const int host = layout.host_of(me);
  const auto& local = layout.ranks_on(host);
  const int rails = layout.rails();
  const int my_rail = layout.local_index(me) < rails ? layout.local_index(me) : -1;

  // Every receive up front: each targets bytes no other phase writes.
  std::vector<RequestPtr> phase1_in, phase2_in, phase3_in;
  if (my_rail >= 0) {
    const auto mine = slice_pieces(layout, blocks, host, my_rail);
    for (int k : local) {
      if (k != me) post(op, false, k, kToRail, buf, blocks, pieces_of_block(mine, k), phase1_in);
    }
    for (int h = 0; h < layout.hosts(); ++h) {
      if (h == host) continue;
      post(op, false, layout.ranks_on(h)[static_cast<size_t>(my_rail)], kAcrossHosts, buf, blocks,
           slice_pieces(layout, blocks, h, my_rail), phase2_in);
    }
  }
  for (int l = 0; l < rails; ++l) {
    const int rail = local[static_cast<size_t>(l)];
    if (rail != me) post(op, false, rail, kFromRail, buf, blocks, pieces_of_block(rail_pieces(layout, blocks, l), me, false), phase3_in);
  }

  std::vector<RequestPtr> sends;
  for (int l = 0; l < rails; ++l) {
    const int rail = local[static_cast<size_t>(l)];
    if (rail != me) post(op, true, rail, kToRail, buf, blocks, pieces_of_block(slice_pieces(layout, blocks, host, l), me), sends);
  }
  if (my_rail >= 0) {
    co_await op.wait(std::move(phase1_in));
    const auto mine = slice_pieces(layout, blocks, host, my_rail);
    for (int h = 0; h < layout.hosts(); ++h) {
      if (h != host) post(op, true, layout.ranks_on(h)[static_cast<size_t>(my_rail)], kAcrossHosts, buf, blocks, mine, sends);
    }
    co_await op.wait(std::move(phase2_in));
    const auto held = rail_pieces(layout, blocks, my_rail);
    for (int k : local) {
      if (k != me) post(op, true, k, kFromRail, buf, blocks, pieces_of_block(held, k, false), sends);
    }
  }
  co_await op.wait(std::move(phase3_in));
  co_await op.wait(std::move(sends));
}

}  // namespace fsdp
