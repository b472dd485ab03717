// All-to-all over shared-memory windows: every rank's send buffer lies in a window, so rank r copies
// its block straight from each peer's send buffer into its receive buffer (peers r+1, r+2, ... in
// turn, so the ranks do not all read rank 0 first; its own block last), then waits until the peers
// copied theirs from its send buffer. One copy per byte, no staging, no process_vm_readv; the receive
// buffer may be any memory. Blocks may differ per pair (all_to_all_v): where each peer's block for r
// lies was posted through the control block and checked by sync.agree().
#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/window_sync.h"

namespace fsdp {

Task alltoall_window(Op& op, WindowSync& sync, std::byte* out, const PeerBlocks& recv) {
  const int n = op.size();
  const int r = op.rank();
  for (int k = 1; k <= n; ++k) {
    const int p = (r + k) % n;
    copy_bytes(out + recv.offset[p], sync.read_of(p) + sync.block_of(p, r).offset, recv.bytes[p]);
  }
  co_await sync.phase_done(1);
}

}  // namespace fsdp
