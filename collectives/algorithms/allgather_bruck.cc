// Bruck all-gather for small messages: works for any n in ceil(log2 n) rounds. A rank keeps the
// blocks it has in a rotated buffer (slot i holds block r + i); in round k it sends its first
// min(2^k, n - 2^k) slots to rank r - 2^k and receives as many from r + 2^k, then unrotates.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task allgather_bruck(Op& op, std::byte* buf, size_t block_bytes) {
  const int n = op.size();
  const int r = op.rank();
  if (n == 1 || block_bytes == 0) co_return;
  std::byte* rotated = op.scratch(kScratchGather, block_bytes * n);
  copy_bytes(rotated, buf + r * block_bytes, block_bytes);
  int step = 0;
  for (int dist = 1; dist < n; dist *= 2, ++step) {
    const size_t blocks = std::min(dist, n - dist);
    const int to = (r - dist + n) % n;
    const int from = (r + dist) % n;
    co_await op.wait(op.send(to, slot(step, 0), rotated, blocks * block_bytes),
                      op.recv(from, slot(step, 0), rotated + dist * block_bytes, blocks * block_bytes));
  }
  for (int i = 1; i < n; ++i) copy_bytes(buf + ((r + i) % n) * block_bytes, rotated + i * block_bytes, block_bytes);
}

}  // namespace fsdp
