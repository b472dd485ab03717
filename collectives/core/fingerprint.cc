#include "collectives/core/fingerprint.h"

namespace fsdp {

Fingerprint Fingerprint::of(CollectiveKind collective, uint64_t seq, uint64_t count, int dtype, int root, int reduce) {
  Fingerprint f;
  f.seq = seq;
  f.count = count;
  f.op = static_cast<int32_t>(collective);
  f.dtype = dtype;
  f.root = root;
  f.reduce = reduce;
  return f;
}

std::string describe(const Fingerprint& f) {
  const auto kind = static_cast<CollectiveKind>(f.op);
  std::string s = is_valid(kind) ? std::string(name(kind)) : "unknown collective " + std::to_string(f.op);
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

int first_mismatch(std::span<const Fingerprint> all, std::string& text) {
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    text = "collective mismatch: rank 0 called " + describe(all[0]) + " but rank " + std::to_string(r) + " called " +
           describe(all[r]);
    return static_cast<int>(r);
  }
  return -1;
}

}  // namespace fsdp
