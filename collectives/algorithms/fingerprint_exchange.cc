#include <memory_resource>
#include <vector>

#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task exchange_fingerprints(Op& op, Fingerprint mine) {
  const int n = op.size();
  if (n == 1) co_return;
  std::pmr::vector<Fingerprint> all(static_cast<size_t>(n), &op.arena());
  all[static_cast<size_t>(op.rank())] = mine;
  co_await allgather_bruck(op, reinterpret_cast<std::byte*>(all.data()), sizeof(Fingerprint));
  for (int r = 1; r < n; ++r) {
    if (all[static_cast<size_t>(r)] == all[0]) continue;
    // Every rank holds the same list, so every rank raises the same error at once.
    throw MismatchError(op.context(), "collective mismatch: rank 0 called " + describe(all[0]) + " but rank " +
                                          std::to_string(r) + " called " + describe(all[static_cast<size_t>(r)]) +
                                          " (FSDP_CHECK_COLLECTIVES)");
  }
}

}  // namespace fsdp
