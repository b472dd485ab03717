// Pairwise-exchange all-to-all. At step s (1 .. n-1) rank r sends its block for rank (r + s) % n and
// receives rank (r - s) % n's block for it, so every pair meets exactly once and each rank sends and
// receives (n-1)/n of its buffer. Nothing is forwarded: each block travels straight from its source,
// which is what a quantised reduce-scatter needs (a ring would decode, add and re-encode at every hop,
// compounding the quantisation error n-1 times).
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task alltoall_pairwise(Op& op, const std::byte* in, std::byte* out, size_t block_bytes) {
  const int n = op.size();
  const int r = op.rank();
  copy_bytes(out + r * block_bytes, in + r * block_bytes, block_bytes);
  if (n == 1 || block_bytes == 0) co_return;
  const Chunking chunks(op.chunk_bytes(), block_bytes, 1);
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n;
    const int from = (r - s + n) % n;
    std::vector<RequestPtr> requests;
    for (size_t c = 0; c < chunks.count(block_bytes); ++c) {
      const size_t at = c * chunks.size, len = chunks.length(block_bytes, c);
      requests.push_back(op.recv(from, slot(s, c), out + from * block_bytes + at, len));
      requests.push_back(op.send(to, slot(s, c), in + to * block_bytes + at, len));
    }
    co_await op.wait(std::move(requests));
  }
}

}  // namespace fsdp
