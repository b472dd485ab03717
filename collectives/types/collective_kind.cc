#include "collectives/types/collective_kind.h"

#include <string>

#include "common/errors.h"

namespace fsdp {
namespace {

constexpr std::string_view kNames[kNumCollectiveKinds] = {
    "all_gather", "reduce_scatter", "all_reduce",   "broadcast", "reduce",
    "all_to_all", "barrier",        "all_to_all_v", "send",      "recv"};

}  // namespace

std::string_view name(CollectiveKind k) { return is_valid(k) ? kNames[static_cast<int>(k)] : "invalid"; }

bool is_valid(CollectiveKind k) {
  const int v = static_cast<int>(k);
  return v >= 0 && v < kNumCollectiveKinds;
}

std::optional<CollectiveKind> parse_collective(std::string_view s) {
  for (int i = 0; i < kNumCollectiveKinds; ++i) {
    if (kNames[i] == s) return static_cast<CollectiveKind>(i);
  }
  return std::nullopt;
}

CollectiveKind collective_kind(std::string_view s) {
  if (auto k = parse_collective(s)) return *k;
  throw InvalidArgument("unknown collective '" + std::string(s) + "'");
}

}  // namespace fsdp
