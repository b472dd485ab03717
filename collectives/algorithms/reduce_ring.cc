// Large-message reduce: a ring reduce-scatter leaves each rank one reduced block, and every rank
// sends its block to the root. Each rank sends about the message once, where a binomial tree would
// push log2 n whole copies toward the root.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task reduce_ring(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red, int root) {
  const int n = op.size();
  const int r = op.rank();
  const Blocks blocks{count, n, red.elem()};
  std::byte* mine = r == root ? out + blocks.offset(r) : op.scratch(kScratchGather, blocks.max_bytes());
  co_await reduce_scatter_ring(op, in, mine, blocks, red);
  if (n == 1) co_return;
  op.next_phase();
  RequestList transfers = op.request_list();
  if (r == root) {
    for (int b = 0; b < n; ++b) {
      if (b != root && blocks.bytes(b) > 0) transfers.push_back(op.recv(b, slot(0, 0), out + blocks.offset(b), blocks.bytes(b)));
    }
  } else if (blocks.bytes(r) > 0) {
    transfers.push_back(op.send(root, slot(0, 0), mine, blocks.bytes(r)));
  }
  co_await op.wait(std::move(transfers));
}

}  // namespace fsdp
