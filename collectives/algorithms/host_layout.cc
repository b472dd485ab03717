#include "collectives/algorithms/host_layout.h"

#include <algorithm>
#include <map>

namespace fsdp {

HostLayout::HostLayout(const std::vector<int>& host_of) {
  std::map<int, int> number;  // label -> host index, in order of first (lowest) rank
  host_of_.resize(host_of.size());
  local_.resize(host_of.size());
  for (size_t r = 0; r < host_of.size(); ++r) {
    auto [it, fresh] = number.emplace(host_of[r], static_cast<int>(number.size()));
    if (fresh) ranks_.emplace_back();
    host_of_[r] = it->second;
    local_[r] = static_cast<int>(ranks_[static_cast<size_t>(it->second)].size());
    ranks_[static_cast<size_t>(it->second)].push_back(static_cast<int>(r));
  }
  rails_ = ranks_.empty() ? 1 : static_cast<int>(ranks_.front().size());
  for (const auto& rs : ranks_) rails_ = std::min(rails_, static_cast<int>(rs.size()));
}

HostLayout HostLayout::subset(const std::vector<int>& members) const {
  std::vector<int> labels;
  labels.reserve(members.size());
  for (int m : members) labels.push_back(host_of(m));
  return HostLayout(labels);
}

std::vector<Piece> slice_pieces(const HostLayout& layout, const Blocks& blocks, int host, int rail) {
  const auto& ranks = layout.ranks_on(host);
  size_t region_elems = 0;
  for (int r : ranks) region_elems += blocks.count_of(r);
  // Slice `rail` of the region in elements, split like Blocks splits a buffer over ranks.
  const Blocks slices{region_elems, layout.rails(), blocks.elem};
  const size_t begin = slices.offset(rail), end = begin + slices.bytes(rail);
  std::vector<Piece> pieces;
  size_t at = 0;  // region bytes before the current block
  for (int r : ranks) {
    const size_t b = blocks.bytes(r);
    const size_t lo = std::max(begin, at), hi = std::min(end, at + b);
    if (lo < hi) pieces.push_back(Piece{r, lo - at, hi - lo});
    at += b;
  }
  return pieces;
}

std::vector<Piece> pieces_of_block(const std::vector<Piece>& pieces, int block, bool inside) {
  std::vector<Piece> out;
  for (const Piece& p : pieces) {
    if ((p.block == block) == inside) out.push_back(p);
  }
  return out;
}

size_t total_bytes(const std::vector<Piece>& pieces) {
  size_t n = 0;
  for (const Piece& p : pieces) n += p.bytes;
  return n;
}

}  // namespace fsdp
