// Hierarchical reduce-scatter for ranks spread over hosts (host_layout.h has the slices and rails).
//   1. intra-host: every rank sends its input for slice (*, l) (that slice of every host's region) to
//      rail l of its host, which sums the host's contributions;
//   2. inter-host, along each rail: rail l of host h sends its partial of slice (g, l) to rail l of
//      host g and sums what the other hosts send for slice (h, l): now fully reduced;
//   3. intra-host: rail l hands each rank of its host the part of slice (h, l) in that rank's block.
// Each element is reduced at exactly one rank, in a fixed order (own input, then local ranks, then
// hosts, ascending), so the result does not depend on arrival order.
#include <cstring>

#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/host_layout.h"
#include "collectives/kernels/reduce_kernels.h"

namespace fsdp {
namespace {

constexpr int kToRail = 1, kAcrossHosts = 2, kFromRail = 3;

// Pieces packed back to back in `packed`, in order.
std::vector<RequestPtr> post_packed(Op& op, bool send, int peer, int phase, std::byte* packed,
                                    const std::vector<Piece>& pieces) {
  std::vector<RequestPtr> out;
  size_t at = 0, index = 0;
  for (const Piece& p : pieces) {
    out.push_back(send ? op.send(peer, slot(phase, index), packed + at, p.bytes)
                       : op.recv(peer, slot(phase, index), packed + at, p.bytes));
    at += p.bytes;
    ++index;
  }
  return out;
}

// Pieces in place in a buffer of whole blocks (`base` + the block's offset).
std::vector<RequestPtr> post_in_place(Op& op, bool send, int peer, int phase, const std::byte* base,
                                      const Blocks& blocks, const std::vector<Piece>& pieces) {
  std::vector<RequestPtr> out;
  size_t index = 0;
  for (const Piece& p : pieces) {
    auto* at = const_cast<std::byte*>(base + blocks.offset(p.block) + p.offset);
    out.push_back(send ? op.send(peer, slot(phase, index), at, p.bytes) : op.recv(peer, slot(phase, index), at, p.bytes));
    ++index;
  }
  return out;
}

}  // namespace

Task reduce_scatter_hierarchical(Op& op, const std::byte* in, std::byte* out, Blocks blocks, Reduction red,
                                 const HostLayout& layout) {
  const int me = op.rank();
  if (op.size() == 1) {
    if (out != in + blocks.offset(me)) copy_bytes(out, in + blocks.offset(me), blocks.bytes(me));
    co_return;
  }
  if (blocks.total_bytes() == 0) co_return;
  const int host = layout.host_of(me);
  const auto& local = layout.ranks_on(host);
  const int rails = layout.rails();
  const int my_rail = layout.local_index(me) < rails ? layout.local_index(me) : -1;
  const size_t elem = red.elem();

  // Rail l's share of the whole buffer: slice (g, l) for every host g, in host order.
  auto rail_share = [&](int l) {
    std::vector<Piece> all;
    for (int g = 0; g < layout.hosts(); ++g) {
      const auto s = slice_pieces(layout, blocks, g, l);
      all.insert(all.end(), s.begin(), s.end());
    }
    return all;
  };

  std::vector<RequestPtr> sends;
  for (int l = 0; l < rails; ++l) {
    const int rail = local[static_cast<size_t>(l)];
    if (rail != me) {
      auto s = post_in_place(op, true, rail, kToRail, in, blocks, rail_share(l));
      sends.insert(sends.end(), s.begin(), s.end());
    }
  }

  // Phase 3's receives: the parts of this rank's block other rails reduced. Posted now, as they land
  // in `out`; in place, `out` is this rank's block of `in`, which phase 1 reads: only write it after
  // phase 1's sends are done, so receive into scratch and copy then.
  const bool out_aliases_in = overlaps(out, blocks.bytes(me), in, blocks.total_bytes());
  std::byte* own = out_aliases_in ? op.scratch(kScratchHierOwn, blocks.bytes(me)) : out;
  std::vector<RequestPtr> phase3_in;
  for (int l = 0; l < rails; ++l) {
    const int rail = local[static_cast<size_t>(l)];
    if (rail == me) continue;
    const auto mine = pieces_of_block(slice_pieces(layout, blocks, host, l), me);
    size_t index = 0;
    for (const Piece& p : mine) {
      phase3_in.push_back(op.recv(rail, slot(kFromRail, index++), own + p.offset, p.bytes));
    }
  }

  if (my_rail >= 0) {
    // Phase 1: sum the host's contributions to this rail's share, packed in `acc`.
    const auto share = rail_share(my_rail);
    const size_t share_bytes = total_bytes(share);
    const int others = static_cast<int>(local.size()) - 1;
    std::byte* acc = op.scratch(kScratchHierAcc, share_bytes);
    std::byte* incoming = op.scratch(kScratchHierIncoming, share_bytes * static_cast<size_t>(std::max(others, 1)));
    {
      size_t at = 0;
      for (const Piece& p : share) {
        copy_bytes(acc + at, in + blocks.offset(p.block) + p.offset, p.bytes);
        at += p.bytes;
      }
    }
    std::vector<std::vector<RequestPtr>> from_local;
    int k_index = 0;
    for (int k : local) {
      if (k == me) continue;
      from_local.push_back(post_packed(op, false, k, kToRail, incoming + share_bytes * static_cast<size_t>(k_index++), share));
    }
    for (size_t k = 0; k < from_local.size(); ++k) {
      co_await op.wait(std::move(from_local[k]));
      reduce_into(acc, incoming + share_bytes * k, share_bytes / elem, red.type, red.kind);
    }

    // Phase 2: swap partials along the rail. acc holds slice (g, my_rail) for g in host order.
    std::vector<size_t> slice_at(static_cast<size_t>(layout.hosts()) + 1, 0);
    std::vector<std::vector<Piece>> slices;
    for (int g = 0; g < layout.hosts(); ++g) {
      slices.push_back(slice_pieces(layout, blocks, g, my_rail));
      slice_at[static_cast<size_t>(g) + 1] = slice_at[static_cast<size_t>(g)] + total_bytes(slices.back());
    }
    const size_t mine_bytes = total_bytes(slices[static_cast<size_t>(host)]);
    std::byte* mine = acc + slice_at[static_cast<size_t>(host)];
    std::byte* remote = op.scratch(kScratchHierRemote, mine_bytes * static_cast<size_t>(std::max(layout.hosts() - 1, 1)));
    std::vector<std::vector<RequestPtr>> from_hosts;
    int g_index = 0;
    for (int g = 0; g < layout.hosts(); ++g) {
      if (g == host) continue;
      const int peer = layout.ranks_on(g)[static_cast<size_t>(my_rail)];
      auto s = post_packed(op, true, peer, kAcrossHosts, acc + slice_at[static_cast<size_t>(g)], slices[static_cast<size_t>(g)]);
      sends.insert(sends.end(), s.begin(), s.end());
      from_hosts.push_back(post_packed(op, false, peer, kAcrossHosts, remote + mine_bytes * static_cast<size_t>(g_index++),
                                       slices[static_cast<size_t>(host)]));
    }
    for (size_t g = 0; g < from_hosts.size(); ++g) {
      co_await op.wait(std::move(from_hosts[g]));
      reduce_into(mine, remote + mine_bytes * g, mine_bytes / elem, red.type, red.kind);
    }

    // Phase 3: hand out the reduced slice (host, my_rail) by block.
    size_t at = 0;
    std::vector<size_t> index_for(static_cast<size_t>(layout.size()), 0);
    for (const Piece& p : slices[static_cast<size_t>(host)]) {
      if (p.block == me) {
        copy_bytes(own + p.offset, mine + at, p.bytes);
      } else {
        sends.push_back(op.send(p.block, slot(kFromRail, index_for[static_cast<size_t>(p.block)]++), mine + at, p.bytes));
      }
      at += p.bytes;
    }
  }
  co_await op.wait(std::move(phase3_in));
  co_await op.wait(std::move(sends));
  if (own != out) std::memcpy(out, own, blocks.bytes(me));
}

}  // namespace fsdp
