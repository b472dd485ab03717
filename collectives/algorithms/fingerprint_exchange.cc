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
  // Every rank holds the same list, so every rank raises the same error at once.
  std::string text;
  if (first_mismatch(all, text) >= 0) throw MismatchError(op.context(), text + " (FSDP_CHECK_COLLECTIVES)");
}

}  // namespace fsdp
