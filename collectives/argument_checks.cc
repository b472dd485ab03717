#include "collectives/argument_checks.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace fsdp {

void Checker::fail(const std::string& what) const {
  throw InvalidArgument(std::string(name(op)) + " on rank " + std::to_string(rank) + ": " + what);
}

size_t Checker::bytes(size_t count, DataType t, size_t multiple) const {
  if (!is_valid(t)) fail("invalid data type " + std::to_string(static_cast<int>(t)));
  const size_t elem = element_size(t);
  if (count > std::numeric_limits<size_t>::max() / elem / multiple)
    fail("count " + std::to_string(count) + " overflows");
  return count * elem * multiple;
}

void Checker::buffer(const void* p, size_t bytes, const char* which) const {
  if (!p && bytes > 0) fail(std::string("null ") + which + " buffer with " + std::to_string(bytes) + " bytes");
}

void Checker::reduce_op(ReduceOp r, DataType t) const {
  if (!is_valid(r.kind)) fail("invalid reduction op " + std::to_string(static_cast<int>(r.kind)));
  if (r.kind == ReduceKind::kPremulSum && !is_floating(t) &&
      r.scalar != static_cast<double>(static_cast<long long>(r.scalar))) {
    fail("premul-sum scalar " + std::to_string(r.scalar) + " is not an integer, but the type " + std::string(name(t)) +
         " is");
  }
}

void Checker::root(int r) const {
  if (r < 0 || r >= size) fail("root " + std::to_string(r) + " is outside [0, " + std::to_string(size) + ")");
}

void Checker::peer(int p) const {
  if (p < 0 || p >= size) fail("peer " + std::to_string(p) + " is outside [0, " + std::to_string(size) + ")");
}

PeerBlocks Checker::blocks(std::span<const size_t> counts, std::span<const size_t> displs, DataType t, const void* buf,
                           const char* which) const {
  if (counts.size() != static_cast<size_t>(size) || displs.size() != static_cast<size_t>(size)) {
    fail(std::string(which) + " counts and displacements need " + std::to_string(size) + " entries each, got " +
         std::to_string(counts.size()) + " and " + std::to_string(displs.size()));
  }
  PeerBlocks b{std::pmr::vector<size_t>(size), std::pmr::vector<size_t>(size)};
  for (int r = 0; r < size; ++r) {
    if (counts[r] > std::numeric_limits<size_t>::max() - displs[r]) {
      fail(std::string(which) + " block of rank " + std::to_string(r) + " overflows");
    }
    b.offset[r] = bytes(displs[r], t);
    b.bytes[r] = bytes(counts[r], t);
    bytes(displs[r] + counts[r], t);  // the block's end must be addressable too
    buffer(buf, b.bytes[r], which);
  }
  return b;
}

size_t Checker::extent(const PeerBlocks& b) {
  size_t end = 0;
  for (size_t r = 0; r < b.bytes.size(); ++r) {
    if (b.bytes[r] > 0) end = std::max(end, b.offset[r] + b.bytes[r]);
  }
  return end;
}

void Checker::disjoint_receives(const PeerBlocks& recv, const void* recv_buf, const PeerBlocks& send,
                                const void* send_buf) const {
  std::vector<int> order(size);
  for (int r = 0; r < size; ++r) order[r] = r;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return recv.offset[a] < recv.offset[b]; });
  int last = -1;  // the non-empty block reaching furthest so far
  for (int r : order) {
    if (recv.bytes[r] == 0) continue;
    if (last >= 0 && recv.offset[r] < recv.offset[last] + recv.bytes[last]) {
      fail("receive blocks of ranks " + std::to_string(last) + " and " + std::to_string(r) + " overlap");
    }
    if (last < 0 || recv.offset[r] + recv.bytes[r] > recv.offset[last] + recv.bytes[last]) last = r;
  }
  if (overlaps(send_buf, extent(send), recv_buf, extent(recv))) fail("send and recv overlap");
}

size_t Checker::runs(std::span<const GatherRun> runs, size_t block_bytes, DataType t) const {
  if (runs.empty()) fail("no runs (the plain all_gather writes rank-major)");
  const size_t elem = element_size(t);
  bool ascending = true;  // every written run starts at or past the end of the one before: no sort needed
  size_t reach = 0;       // the end of the furthest written run so far
  for (size_t i = 0; i < runs.size(); ++i) {
    const GatherRun& r = runs[i];
    auto which = [i] { return "run " + std::to_string(i); };
    if (r.src % elem || r.dst % elem || r.per_rank % elem || r.total % elem) {
      fail(which() + " is not in whole " + std::string(name(t)) + " elements");
    }
    if (r.total > r.per_rank * static_cast<size_t>(size)) {
      fail(which() + ": " + std::to_string(r.total) + " bytes do not fit " + std::to_string(size) + " pieces of " +
           std::to_string(r.per_rank));
    }
    if (r.src > block_bytes || r.piece(0) > block_bytes - r.src) {
      fail(which() + ": a piece of " + std::to_string(r.piece(0)) + " bytes at " + std::to_string(r.src) +
           " runs past the " + std::to_string(block_bytes) + "-byte block");
    }
    if (r.total == 0) continue;
    if (r.dst > SIZE_MAX - r.total)
      fail(which() + ": " + std::to_string(r.total) + " bytes at recv byte " + std::to_string(r.dst) +
           " run past the address space");
    ascending &= r.dst >= reach;
    reach = std::max(reach, r.dst + r.total);
  }
  if (ascending) return reach;  // FSDP's runs, tensor after tensor: no heap call on the engine path
  // Out of order: sorted by start, each must begin at or past the end of the one before.
  std::vector<std::pair<size_t, size_t>> spans;  // (dst, end) of each written run
  for (const GatherRun& r : runs) {
    if (r.total > 0) spans.emplace_back(r.dst, r.dst + r.total);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) {
      fail("two runs write recv bytes " + std::to_string(spans[i].first) + ".." + std::to_string(spans[i - 1].second));
    }
  }
  return reach;
}

void Checker::in_place_layout(const void* outer, size_t outer_bytes, const void* inner, size_t inner_bytes,
                              size_t slice_offset, const char* what) const {
  if (!overlaps(outer, outer_bytes, inner, inner_bytes)) return;
  if (static_cast<const std::byte*>(outer) + slice_offset == inner) return;
  fail(std::string("buffers overlap but ") + what);
}

}  // namespace fsdp
