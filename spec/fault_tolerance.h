// How a job survives a lost rank (docs/fault_tolerance.md): the [fault_tolerance] section's typed home.
//
//   enable = false:  a lost rank ends the job (fsdp-run --max-restarts may start it again from a checkpoint);
//   enable = true:   the survivors agree on the failed set through the launcher's store, shrink, re-plan at
//                    the new world size with the same global batch, rebuild the lost shards from the
//                    redundancy and redo the interrupted step.
//
// Redundancy (what keeps a lost rank's shard alive), priced by the planner:
//   kNone:  nothing beyond what the mesh holds (HSDP replicas hold every shard; plain FSDP loses it);
//   kBuddy: rank r of a shard group of S also keeps a mirror of the master shard and optimizer state of
//           rank (r + 1) % S; every step it receives that rank's reduced (clipped) gradient shard, 1/S of
//           the model, and applies the same optimizer update to the mirror. Costs one more copy of the
//           shard state per rank and one gradient shard of traffic per rank per step.
// On HSDP (replicate > 1) the replicas are the redundancy and no mirror is kept; fault_tolerance.redundancy
// then says what the job keeps once a loss leaves it plain FSDP (mesh_after_loss).
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "spec/mesh.h"

namespace fsdp::spec {

enum class Redundancy { kNone, kBuddy };
std::string_view name(Redundancy r);              // "none", "buddy"
Redundancy parse_redundancy(std::string_view s);  // throws SpecError naming the choices

struct FaultTolerance {
  bool enable = false;
  Redundancy redundancy = Redundancy::kBuddy;  // what enable = true keeps; kNone without it
  int64_t min_world_size = 1;                  // fewer survivors than this: the job ends (or restarts)
  // A survivor waits this long for every rank of the old world to report alive or be known lost before
  // the agreement is decided without the silent ones.
  std::chrono::milliseconds recovery_timeout{30000};
  // The redundancy the job actually keeps on plain FSDP: enable ? redundancy : kNone.
  Redundancy effective_redundancy() const { return enable ? redundancy : Redundancy::kNone; }
  // The same on `mesh`: kNone on HSDP, whose replicas already hold every shard.
  Redundancy effective_redundancy(const Mesh& mesh) const {
    return mesh.replicate_degree() > 1 ? Redundancy::kNone : effective_redundancy();
  }
};

// The mesh a job of `original`'s mesh goes on with after a loss leaves `survivors` ranks
// (docs/fault_tolerance.md#hsdp). HSDP R x S keeps its shard degree when the survivors still make two or
// more whole replicas: (survivors / S) x S, the replicas again the redundancy. Otherwise (and always for
// plain FSDP) plain FSDP over every survivor, whose redundancy is fault_tolerance.redundancy (the buddy
// mirror, or none: the next loss then means a restart). Every survivor is used and the rule depends on the
// original mesh and the count only, so every epoch's mesh is the same on every rank. Throws SpecError for
// fewer than one survivor or more than the original world.
Mesh mesh_after_loss(const Mesh& original, int64_t survivors);

// Throws SpecError naming the key (fault_tolerance.min_world_size, ...) for a minimum world size below 1
// or above the world, or a non-positive recovery timeout.
void validate(const FaultTolerance& ft, int64_t world_size);

}  // namespace fsdp::spec
