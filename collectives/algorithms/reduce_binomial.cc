// Binomial-tree reduce for small messages: relative to the root, a rank receives and folds in the
// partials of the ranks above it bit by bit, then sends its own partial to the rank that clears its
// lowest set bit. ceil(log2 n) rounds.
#include <cstring>

#include "collectives/algorithms/algorithms.h"
#include "collectives/kernels/reduce_kernels.h"

namespace fsdp {

Task reduce_binomial(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red, int root) {
  const int n = op.size();
  const int r = op.rank();
  const size_t bytes = count * red.elem();
  std::byte* acc = r == root ? out : op.scratch(kScratchPartialA, bytes);
  if (acc != in) copy_bytes(acc, in, bytes);
  if (n == 1 || bytes == 0) co_return;
  std::byte* incoming = op.scratch(kScratchGather, bytes);
  const int vrank = (r - root + n) % n;
  auto real = [&](int v) { return (v + root) % n; };
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((vrank & mask) == 0) {
      const int child = vrank | mask;
      if (child >= n) continue;
      co_await op.wait(op.recv(real(child), slot(0, 0), incoming, bytes));
      reduce_into(acc, incoming, count, red.type, red.kind);
    } else {
      co_await op.wait(op.send(real(vrank & ~mask), slot(0, 0), acc, bytes));
      break;
    }
  }
}

}  // namespace fsdp
