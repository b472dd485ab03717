// Pairwise-exchange all-to-all. At step s (1 .. n-1) rank r sends its block for rank (r + s) % n and
// receives rank (r - s) % n's block for it, so every pair meets exactly once and each rank sends and
// receives (n-1)/n of its buffer. Nothing is forwarded: each block travels straight from its source,
// which is what a quantised reduce-scatter needs (a ring would decode, add and re-encode at every hop,
// compounding the quantisation error n-1 times).
//
// Blocks may differ per peer (all_to_all_v). Every pair exchanges one message per direction even when
// it is empty, so a count on which two ranks disagree fails both with the transport's size-mismatch
// error instead of leaving one side waiting or writing past a block.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task alltoall_pairwise(Op& op, const std::byte* in, const PeerBlocks& send, std::byte* out, const PeerBlocks& recv) {
  const int n = op.size();
  const int r = op.rank();
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n;
    const int from = (r - s + n) % n;
    RequestPtr incoming = op.recv(from, slot(s, 0), out + recv.offset[from], recv.bytes[from]);
    RequestPtr outgoing = op.send(to, slot(s, 0), in + send.offset[to], send.bytes[to]);
    // The own block is copied once the first exchange is posted, so a peer can already pull from us.
    if (s == 1) copy_bytes(out + recv.offset[r], in + send.offset[r], send.bytes[r]);
    co_await op.wait(std::move(incoming), std::move(outgoing));
  }
  if (n == 1) copy_bytes(out + recv.offset[r], in + send.offset[r], send.bytes[r]);
}

}  // namespace fsdp
