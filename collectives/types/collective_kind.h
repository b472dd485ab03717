// Which collective an operation is: the one name the communicator, algorithm selection (FSDP_ALGO),
// the flag path, fingerprints, the flight recorder and the runtime's observers share.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fsdp {

// The value is what fingerprints carry between ranks (collectives/core/fingerprint.h): append only.
enum class CollectiveKind : int32_t {
  kAllGather = 0,
  kReduceScatter = 1,
  kAllReduce = 2,
  kBroadcast = 3,
  kReduce = 4,
  kAllToAll = 5,
  kBarrier = 6,
  kAllToAllV = 7,
  kSend = 8,  // point-to-point: recorded and named, never fingerprinted
  kRecv = 9,
};
inline constexpr int kNumCollectiveKinds = 10;

// "all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "all_to_all", "barrier",
// "all_to_all_v", "send", "recv": as FSDP_ALGO, error texts and flight recorder dumps spell them.
std::string_view name(CollectiveKind k);
bool is_valid(CollectiveKind k);
// The kind `s` names; nullopt when none does.
std::optional<CollectiveKind> parse_collective(std::string_view s);
// As parse_collective, but throws InvalidArgument ("unknown collective 's'") when none does.
CollectiveKind collective_kind(std::string_view s);

}  // namespace fsdp
