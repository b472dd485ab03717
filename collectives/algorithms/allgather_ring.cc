// Ring all-gather. At step s rank r forwards block (r - s) to its right neighbour and receives block
// (r - s - 1) from its left; after n - 1 steps every rank holds every block. Blocks travel in chunks,
// and a chunk is forwarded the moment it has arrived, so a long ring pipelines instead of paying
// n - 1 full-block latencies.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task allgather_ring(Op& op, std::byte* buf, Blocks blocks) {
  const int n = op.size();
  const int r = op.rank();
  if (n == 1 || blocks.total_bytes() == 0) co_return;
  const int right = (r + 1) % n;
  const int left = (r - 1 + n) % n;
  // With two ranks nothing is forwarded, so chunks buy no pipelining: each block goes as one message,
  // which a transport can move in one copy (shm's cross-memory attach pulls it straight into place).
  const Chunking chunks(n == 2 ? blocks.max_bytes() : op.chunk_bytes(), blocks.max_bytes(), blocks.elem);
  auto block_at = [&](int s) { return ((r - s) % n + n) % n; };  // the block sent at step s

  // Posts every receive of step s (distinct memory per step, so all can be posted up front).
  auto post_recvs = [&](int s) {
    RequestList recvs = op.request_list();
    const int b = block_at(s + 1);
    for (size_t c = 0; c < chunks.count(blocks.bytes(b)); ++c) {
      recvs.push_back(op.recv(left, slot(s, c), buf + blocks.offset(b) + c * chunks.size,
                              chunks.length(blocks.bytes(b), c)));
    }
    return recvs;
  };

  RequestList sends = op.request_list();
  for (size_t c = 0; c < chunks.count(blocks.bytes(r)); ++c) {
    sends.push_back(op.send(right, slot(0, c), buf + blocks.offset(r) + c * chunks.size,
                            chunks.length(blocks.bytes(r), c)));
  }
  RequestList recvs = post_recvs(0);
  for (int s = 0; s < n - 1; ++s) {
    const bool last = s == n - 2;
    RequestList next = last ? op.request_list() : post_recvs(s + 1);
    const int b = block_at(s + 1);  // what arrives now, and is forwarded at step s + 1
    for (size_t c = 0; c < recvs.size(); ++c) {
      co_await op.wait(recvs[c]);
      if (!last) {
        sends.push_back(op.send(right, slot(s + 1, c), buf + blocks.offset(b) + c * chunks.size,
                                chunks.length(blocks.bytes(b), c)));
      }
    }
    recvs = std::move(next);
  }
  co_await op.wait(std::move(sends));
}

}  // namespace fsdp
