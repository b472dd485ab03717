// All-gather over shared-memory windows. Rank r copies every peer's block straight from the peer's
// window (to its place in recv, or over the runs: types/gather_run.h), then signals that it is done and
// waits for the peers: they read its block, which the caller may overwrite once this returns.
//
// The copies go chunk by chunk across the blocks: chunk k of peer r+1, of r+2, ..., then chunk k of
// the rank's own block (out of place), then chunk k+1. Every rank does the same, so chunk k of every
// block is read by all ranks at about the same time: it comes from memory once and reaches the other
// readers from cache. Block by block (each rank first copying its own block, then the peers'), the
// blocks are read at different times and at 64 MiB each read came from memory: measured at 2 ranks,
// out of place, 64 MiB, the chunked order was 1.3-1.9x faster (docs/benchmarks.md "In step").
#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/window_sync.h"
#include "collectives/kernels/stream_copy.h"

namespace fsdp {

Task allgather_window(Op& op, WindowSync& sync, std::byte* recv, size_t block_bytes, std::span<const GatherRun> runs,
                      ChunkedCopy& own) {
  const int n = op.size();
  const int r = op.rank();
  // The peers' copies, started at r+1 so that the ranks do not all read rank 0's chunk first.
  std::pmr::vector<ChunkedCopy> peers(&op.arena());
  peers.reserve(static_cast<size_t>(n - 1));
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    if (runs.empty()) {
      peers.emplace_back(recv + static_cast<size_t>(p) * block_bytes, sync.read_of(p), block_bytes);
    } else {
      peers.emplace_back(recv, sync.read_of(p), block_bytes, runs, p);
    }
  }
  for (size_t end = kWindowCopyChunkBytes;; end += kWindowCopyChunkBytes) {
    for (ChunkedCopy& peer : peers) peer.copy_through(end);
    own.copy_through(end);
    if (end >= block_bytes) break;
  }
  co_await sync.phase_done(1);
}

}  // namespace fsdp
