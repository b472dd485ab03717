// Large-message broadcast (van de Geijn): the root sends block b to rank b, then a ring all-gather
// assembles the message everywhere. Every link carries about the message once, instead of the
// log2 n whole copies a binomial tree pushes out of the root.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task broadcast_scatter_allgather(Op& op, std::byte* buf, size_t bytes, int root) {
  const int n = op.size();
  const int r = op.rank();
  if (n == 1 || bytes == 0) co_return;
  const Blocks blocks{bytes, n, 1};
  if (r == root) {
    RequestList sends = op.request_list();
    for (int b = 0; b < n; ++b) {
      if (b != root && blocks.bytes(b) > 0) sends.push_back(op.send(b, slot(0, 0), buf + blocks.offset(b), blocks.bytes(b)));
    }
    co_await op.wait(std::move(sends));
  } else if (blocks.bytes(r) > 0) {
    co_await op.wait(op.recv(root, slot(0, 0), buf + blocks.offset(r), blocks.bytes(r)));
  }
  op.next_phase();
  co_await allgather_ring(op, buf, blocks);
}

}  // namespace fsdp
