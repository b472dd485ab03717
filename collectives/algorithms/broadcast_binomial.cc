// Binomial-tree broadcast: relative to the root, a rank receives once from the rank that differs in
// its lowest set bit, then sends to the ranks below that bit. ceil(log2 n) rounds of the whole
// message: right for small messages.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task broadcast_binomial(Op& op, std::byte* buf, size_t bytes, int root) {
  const int n = op.size();
  if (n == 1 || bytes == 0) co_return;
  const int vrank = (op.rank() - root + n) % n;
  auto real = [&](int v) { return (v + root) % n; };
  int mask = 1;
  while (mask < n) {
    if (vrank & mask) {
      co_await op.wait(op.recv(real(vrank - mask), slot(0, 0), buf, bytes));
      break;
    }
    mask <<= 1;
  }
  RequestList sends = op.request_list();
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vrank + mask < n) sends.push_back(op.send(real(vrank + mask), slot(0, 0), buf, bytes));
  }
  co_await op.wait(std::move(sends));
}

}  // namespace fsdp
