// Small-message reduce-scatter: below FSDP_SMALL_MSG_BYTES a ring's n - 1 latency-bound steps cost
// more than moving the whole (small) buffer log2 n times, so every rank all-reduces it by recursive
// doubling and keeps its own block.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task reduce_scatter_recursive_doubling(Op& op, const std::byte* in, std::byte* out, size_t recv_count, Reduction red) {
  const size_t block_bytes = recv_count * red.elem();
  std::byte* full = op.scratch(kScratchFull, block_bytes * static_cast<size_t>(op.size()));
  co_await allreduce_recursive_doubling(op, in, full, recv_count * static_cast<size_t>(op.size()), red);
  copy_bytes(out, full + static_cast<size_t>(op.rank()) * block_bytes, block_bytes);
}

}  // namespace fsdp
