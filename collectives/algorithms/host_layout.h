// How a communicator's ranks sit on hosts, and the pieces of a buffer the hierarchical algorithms move
// between them.
//
// Host h's region is the concatenation of its ranks' blocks (ranks in ascending order). With L = the
// fewest ranks any host has ("rails"), region h splits into L slices of near-equal bytes; the l-th rank
// of every host is rail l and owns slice (h, l) of every host h. Inter-host traffic only ever flows
// along a rail (rank l of one host to rank l of another), so each rank moves 1/L of the buffer across
// the network, and hosts with more ranks than L just take part in the intra-host phases. Ranks of one
// host need not be contiguous in rank order: a slice is a list of pieces of rank blocks.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/algorithms/blocks.h"

namespace fsdp {

class HostLayout {
 public:
  // host_of[r]: any label per communicator rank; ranks with equal labels share a host. Hosts are
  // numbered by their lowest rank.
  explicit HostLayout(const std::vector<int>& host_of);

  int hosts() const { return static_cast<int>(ranks_.size()); }
  int host_of(int rank) const { return host_of_[static_cast<size_t>(rank)]; }
  const std::vector<int>& ranks_on(int host) const { return ranks_[static_cast<size_t>(host)]; }
  int local_index(int rank) const { return local_[static_cast<size_t>(rank)]; }
  int rails() const { return rails_; }
  int size() const { return static_cast<int>(host_of_.size()); }
  // The sub-layout of `members` (communicator ranks of a split, in their new order).
  HostLayout subset(const std::vector<int>& members) const;

 private:
  std::vector<int> host_of_, local_;
  std::vector<std::vector<int>> ranks_;
  int rails_ = 1;
};

// A byte range of one rank's block.
struct Piece {
  int block = 0;      // the rank whose block it is
  size_t offset = 0;  // bytes into that block
  size_t bytes = 0;
};

// Slice (host, rail) as pieces, in region order; empty pieces are left out. Boundaries fall on
// whole elements of blocks.elem bytes.
std::vector<Piece> slice_pieces(const HostLayout& layout, const Blocks& blocks, int host, int rail);

// The pieces of `pieces` that lie in (or, with `inside` false, outside) block `block`.
std::vector<Piece> pieces_of_block(const std::vector<Piece>& pieces, int block, bool inside = true);

size_t total_bytes(const std::vector<Piece>& pieces);

}  // namespace fsdp
