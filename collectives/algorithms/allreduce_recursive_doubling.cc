// Recursive-doubling all-reduce for small messages: in round k each rank swaps its whole buffer with
// the rank whose index differs in bit k and reduces. For n not a power of two, the first 2*extra
// ranks pair up first (even ranks hand their data to the next odd rank and sit out), and get the
// result back at the end. Every rank combines the same operands in the same tree, and the ops are
// commutative, so all ranks end with bitwise-identical results.
#include <bit>
#include <cstring>

#include "collectives/algorithms/algorithms.h"
#include "collectives/kernels/reduce_kernels.h"

namespace fsdp {

Task allreduce_recursive_doubling(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red) {
  const int n = op.size();
  const int r = op.rank();
  const size_t bytes = count * red.elem();
  if (out != in) copy_bytes(out, in, bytes);
  if (n == 1 || bytes == 0) co_return;
  const int p = std::bit_floor(static_cast<unsigned>(n));
  const int extra = n - p;
  std::byte* incoming = op.scratch(kScratchGather, bytes);

  int vrank;  // rank among the p that run the doubling rounds; -1 when sitting out
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      co_await op.wait(op.send(r + 1, slot(0, 0), out, bytes));
      vrank = -1;
    } else {
      co_await op.wait(op.recv(r - 1, slot(0, 0), incoming, bytes));
      reduce_into(out, incoming, count, red.type, red.kind);
      vrank = r / 2;
    }
  } else {
    vrank = r - extra;
  }

  if (vrank >= 0) {
    int step = 1;
    for (int mask = 1; mask < p; mask <<= 1, ++step) {
      const int vpartner = vrank ^ mask;
      const int partner = vpartner < extra ? vpartner * 2 + 1 : vpartner + extra;
      // Both must finish before reducing: the partner may still be reading `out`.
      co_await op.wait(op.send(partner, slot(step, 0), out, bytes), op.recv(partner, slot(step, 0), incoming, bytes));
      reduce_into(out, incoming, count, red.type, red.kind);
    }
  }

  const int last = 63;
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      co_await op.wait(op.recv(r + 1, slot(last, 0), out, bytes));
    } else {
      co_await op.wait(op.send(r - 1, slot(last, 0), out, bytes));
    }
  }
}

}  // namespace fsdp
