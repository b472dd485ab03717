#include "spec/fault_tolerance.h"

#include <string>

#include "spec/spec_error.h"

namespace fsdp::spec {

std::string_view name(Redundancy r) { return r == Redundancy::kBuddy ? "buddy" : "none"; }

Redundancy parse_redundancy(std::string_view s) {
  if (s == "buddy") return Redundancy::kBuddy;
  if (s == "none") return Redundancy::kNone;
  throw SpecError("fault_tolerance.redundancy: unknown mode '" + std::string(s) + "' (expected buddy or none)");
}

void validate(const FaultTolerance& ft, int64_t world_size) {
  if (ft.min_world_size < 1 || ft.min_world_size > world_size) {
    throw SpecError("fault_tolerance.min_world_size = " + std::to_string(ft.min_world_size) +
                    ": must be between 1 and the world size " + std::to_string(world_size));
  }
  if (ft.recovery_timeout.count() <= 0) {
    throw SpecError("fault_tolerance.recovery_timeout_ms = " + std::to_string(ft.recovery_timeout.count()) +
                    ": must be positive");
  }
}

Mesh mesh_after_loss(const Mesh& original, int64_t survivors) {
  if (survivors < 1 || survivors > original.world_size()) {
    throw SpecError("mesh_after_loss: " + std::to_string(survivors) + " survivors of a world of " +
                    std::to_string(original.world_size()));
  }
  const int64_t shard = original.shard_degree();
  if (original.replicate_degree() > 1 && survivors % shard == 0 && survivors / shard >= 2) {
    return Mesh::for_world(survivors, survivors / shard, shard);
  }
  return Mesh::for_world(survivors, 1);
}

}  // namespace fsdp::spec
