// All-gather over shared-memory windows. Rank r copies block p straight from rank p's window for
// p = r+1, r+2, ... (staggered, so the ranks do not all read rank 0 first; large blocks with streaming
// stores, collectives/types/stream_copy.h), then signals that it is done and waits for the peers:
// they read its block, which the caller may overwrite once this returns.
#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/window_sync.h"
#include "collectives/types/stream_copy.h"

namespace fsdp {

Task allgather_window(Op& op, WindowSync& sync, std::byte* recv, size_t block_bytes) {
  const int n = op.size();
  const int r = op.rank();
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    large_copy(recv + static_cast<size_t>(p) * block_bytes, sync.read_of(p), block_bytes);
  }
  co_await sync.phase_done(1);
}

}  // namespace fsdp
