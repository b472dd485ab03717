// fsdp-train surviving a lost rank (fault_tolerance.enable; docs/fault_tolerance.md): what the step loop
// calls when a step failed on a lost member. Over the ElasticWorld (launch/elastic_world.h):
//
//   1. the step in flight is resolved: kept when every member had voted for it (applied here if this rank
//      had not yet), else dropped; every survivor then stands at the same last committed step S;
//   2. the survivors agree on who is left and reconnect without the lost (a new epoch);
//   3. re-plan: the same model and global batch at the new size (the original data ranks dealt round-robin,
//      TrainerOptions::data_ranks) on spec::mesh_after_loss's mesh (HSDP stays HSDP while whole replicas
//      remain, else plain FSDP with fault_tolerance.redundancy), refused when the planner's peak no longer
//      fits this host (the buddy mirror alone not fitting: the job goes on without it, and says so);
//   4. the new trainer's shards and optimizer state are rebuilt from the old ones, the other replicas' and
//      the redundancy's mirrors (runtime/live_reshard.h), its mirror synced, its step set to S; every rank
//      of the epoch then says whether it rebuilt (ElasticWorld::agree_rebuilt: all go on, or none).
// A member lost during any of it starts the next epoch from the same old state (change_epoch, which a grow
// shares: a rank lost during a grow turns it into this recovery from the pre-grow state). Every copy of a
// shard lost, fewer survivors than fault_tolerance.min_world_size, or a re-plan that does not fit ends the
// job with the reason (fsdp-run --max-restarts then restarts it from its checkpoint).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fault_injection.h"
#include "launch/elastic_world.h"
#include "runtime/live_reshard.h"
#include "train/config.h"
#include "train/trainer.h"

namespace fsdp::train {

struct EpochChange;

// What one recovery did, for the console line, the trace and metrics.jsonl.
struct RecoveryRecord {
  int64_t failed_step = 0;    // the step that was interrupted
  int64_t resumed_after = 0;  // the last committed step S; training goes on with S + 1
  std::vector<int> lost;      // original ranks lost in this recovery
  std::string why;            // the error that started it
  int64_t epoch = 0;          // the epoch the job went on in
  int world_size = 0;         // its size
  std::string layout;         // its mesh and redundancy: "FSDP over 3 ranks with the buddy mirror"
  // Seconds: resolving the step in flight and agreeing, reconnecting, rebuilding the state.
  double agree_seconds = 0, shrink_seconds = 0, reshard_seconds = 0;
  std::chrono::steady_clock::time_point detected;  // when the failure reached the step loop
  std::optional<StepStats> kept_step;              // the interrupted step when it was kept (every member had voted)
  double detected_unix = 0;  // the same as wall-clock seconds, for tools that line it up with a kill
  double detected_into_step = 0;   // seconds from the failed step's start to the failure reaching the loop
  double first_step_seconds = -1;  // the first step after the recovery (the redone one), once it ran
  double recovery_seconds() const { return agree_seconds + shrink_seconds + reshard_seconds; }
  std::string line() const;  // "recovery: rank 2 lost at step 5 (why); ... 3 ranks go on from step 4 ..."
  void note(const EpochChange& change);  // why, who was lost, the epoch, its layout and the times
};

// Thrown when the job cannot go on in-job: the reason, for the console and fsdp-run's restart.
class RecoveryImpossible : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The layout a job goes on in at `world_size` survivors: spec::mesh_after_loss of the config's mesh and
// the redundancy the config keeps on it, without the buddy mirror where only the mirror does not fit this
// host. Throws RecoveryImpossible when even that does not fit.
struct EpochLayout {
  spec::Mesh mesh;
  spec::Redundancy redundancy = spec::Redundancy::kNone;
  bool mirror_dropped = false;   // the config asked for the buddy mirror; it does not fit
  std::string describe() const;  // "HSDP 2 x 2 (the replicas are the redundancy)", ...
};
EpochLayout plan_epoch(const TrainConfig& config, int world_size);

// The trainer options for the epoch `ew` is in now: its layout and the original data ranks (the original
// mesh's data-parallel size) dealt over it.
TrainerOptions options_for_epoch(const TrainerOptions& original, const EpochLayout& layout,
                                 const launch::ElasticWorld& ew);

// Seconds since `t` (steady clock); "1, 2 and 3": the pieces of the recovery and grow lines.
double seconds_since(std::chrono::steady_clock::time_point t);
std::string rank_list(const std::vector<int>& ranks);

// What `t` (rank `source_rank` of its world) holds of that world's shards: its own and its mirror's.
runtime::HeldShard shards_held_by(Trainer& t, int source_rank);

// The state a change of world rebuilds from: the layout of the epoch whose trainer last stood at
// `committed` (its members by launch rank, in rank order; its shard degree; whether it kept buddy mirrors)
// and this rank's copies of it. A recovery, a grow, and either losing a rank on the way, rebuild from it in
// whatever epoch the survivors reach.
struct HeldLayout {
  std::vector<int> members;
  int64_t shard_degree = 0;
  bool mirrored = false;
  int64_t committed = 0;
  const spec::ModelSpec* model = nullptr;  // the old trainer's; null for a newcomer (the new trainer's: the same)
  runtime::HeldShard held;                 // its own shard and its mirror's; nothing for a newcomer
};
// A member's: what `t`, its trainer in the epoch `ew` is in, holds.
HeldLayout held_layout(Trainer& t, const launch::ElasticWorld& ew);

// One change of epoch (a recovery or a grow), for their lines.
struct EpochChange {
  std::vector<int> counted_on;        // in: launch ranks expected in the new epoch (old members, a grow's newcomers)
  std::string why;                    // in: the failure that started it, if any; then what failed on the way
  launch::RecoveryDecision decision;  // the epoch the job went on in
  std::vector<int> lost;              // counted_on that did not reach it
  std::string layout;                 // EpochLayout::describe()
  double agree_seconds = 0, reconnect_seconds = 0, reshard_seconds = 0;
};

// Enters the next epoch through `enter` (ElasticWorld::shrink, grow, or the join already done), re-plans at
// its size, builds the trainer and rebuilds `from` into it (the holders send, newcomers only receive). While
// a rank is lost on the way, agrees on a shrink from the epoch this rank is in and rebuilds from the same
// `from` there. Fault injection's `point` at `point_step` is asked before each rebuild. Throws
// RecoveryImpossible where every copy of a shard is gone, too few ranks are left or the job no longer fits.
std::unique_ptr<Trainer> change_epoch(const TrainConfig& config, launch::ElasticWorld& ew, const HeldLayout& from,
                                      const std::function<launch::RecoveryDecision()>& enter, fault::When point,
                                      int64_t point_step, const TrainerOptions& original, const BatchSource& batches,
                                      EpochChange& change);

// Runs steps 1-4 above. `old` is the trainer whose step failed (its state is read, never changed except to
// apply a kept step); returns the trainer to go on with, over ew.comm(). The caller sets its observers and
// replaces anything else bound to the old world (the checkpointer).
std::unique_ptr<Trainer> recover_from_lost_rank(const TrainConfig& config, launch::ElasticWorld& ew,
                                                std::unique_ptr<Trainer> old, const TrainerOptions& original,
                                                const BatchSource& batches, const std::string& why,
                                                RecoveryRecord& record);

}  // namespace fsdp::train
