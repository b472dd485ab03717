#include "collectives/core/fingerprint.h"

#include <cstring>
#include <iterator>
#include <memory_resource>
#include <vector>

#include "collectives/algorithms/algorithms.h"

namespace fsdp {
namespace {

// The collectives a fingerprint can name; the index is what travels.
constexpr const char* kCollectives[] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast",
                                        "reduce",     "all_to_all",     "barrier",    "all_to_all_v"};

int32_t collective_index(const char* name) {
  for (size_t i = 0; i < std::size(kCollectives); ++i) {
    if (std::strcmp(kCollectives[i], name) == 0) return static_cast<int32_t>(i);
  }
  throw std::logic_error(std::string("no fingerprint for collective '") + name + "'");
}

}  // namespace

Fingerprint Fingerprint::of(const char* collective, uint64_t seq, uint64_t count, int dtype, int root, int reduce) {
  Fingerprint f;
  f.seq = seq;
  f.count = count;
  f.op = collective_index(collective);
  f.dtype = dtype;
  f.root = root;
  f.reduce = reduce;
  return f;
}

std::string describe(const Fingerprint& f) {
  std::string s = f.op >= 0 && f.op < static_cast<int32_t>(std::size(kCollectives))
                      ? kCollectives[f.op]
                      : "unknown collective " + std::to_string(f.op);
  s += "(count " + std::to_string(f.count);
  if (f.dtype >= 0) {
    const auto t = static_cast<DataType>(f.dtype);
    s += ", " + (is_valid(t) ? std::string(name(t)) : "dtype " + std::to_string(f.dtype));
  }
  if (f.reduce >= 0) {
    const auto k = static_cast<ReduceKind>(f.reduce);
    s += ", " + (is_valid(k) ? std::string(name(k)) : "reduce op " + std::to_string(f.reduce));
  }
  if (f.root >= 0) s += ", root " + std::to_string(f.root);
  return s + ") seq " + std::to_string(f.seq);
}

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
