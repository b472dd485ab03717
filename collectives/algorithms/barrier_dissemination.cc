// Dissemination barrier: in round k every rank signals rank r + 2^k and waits for rank r - 2^k.
// After ceil(log2 n) rounds each rank has (transitively) heard from all others.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task barrier_dissemination(Op& op) {
  const int n = op.size();
  const int r = op.rank();
  int step = 0;
  for (int dist = 1; dist < n; dist *= 2, ++step) {
    co_await op.wait(op.send((r + dist) % n, slot(step, 0), nullptr, 0),
                      op.recv((r - dist + n) % n, slot(step, 0), nullptr, 0));
  }
}

}  // namespace fsdp
