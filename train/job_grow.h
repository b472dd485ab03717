// fsdp-train growing back (fault_tolerance.enable; docs/fault_tolerance.md, "Grow back"): a replacement
// process joins the running job at a step boundary and no checkpoint is read. Over the ElasticWorld
// (launch/elastic_world.h, launch/grow_agreement.h):
//
//   members, after a step whose commit said a newcomer waits (ElasticWorld::grow_ticket()):
//     agree on the grown epoch (members in order, newcomers last), reconnect, re-plan at the larger size
//     (the original data ranks dealt over it, TrainerOptions::data_ranks), and rebuild the shards and
//     optimizer state from their own (runtime/live_reshard.h: every old shard's holder is its owner);
//   the newcomer (ElasticWorld::join returned): builds the same trainer and receives its part in the
//     same live_reshard, holding nothing; its step count is the decision's step, its data position a
//     function of the step (train/job_batches.h).
// Both sync the new mirrors, so the redundancy covers the newcomer from its first step. A rank lost during
// the grow turns it into a recovery from the pre-grow state (GrowOutcome).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/elastic_world.h"
#include "train/config.h"
#include "train/job_recovery.h"
#include "train/trainer.h"

namespace fsdp::train {

// What one grow did, for the console line, the trace and metrics.jsonl.
struct GrowRecord {
  int64_t after_step = 0;   // the last step before the grow; training goes on with after_step + 1
  std::vector<int> joined;  // launch ranks of the newcomers
  int64_t epoch = 0;
  int world_size = 0;  // after the grow
  double agree_seconds = 0, reconnect_seconds = 0, reshard_seconds = 0;
  std::chrono::steady_clock::time_point started;
  double first_step_seconds = -1;  // the first step after the grow, once it ran
  double grow_seconds() const { return agree_seconds + reconnect_seconds + reshard_seconds; }
  // "grow: rank 3 joined after step 2; 4 rank(s) go on in epoch 2 (agree ..., reconnect ..., ...)"
  std::string line() const;
};

// What a grow ended as: `grown`, or, where a member or newcomer was lost on the way (before the grown
// epoch connected, or during its reshard), the recovery it turned into (`recovered`): the survivors, old
// members and newcomers alike, agreed on a shrink from the epoch they were in and rebuilt the pre-grow
// state at the committed step there (train/job_recovery.h, change_epoch).
struct GrowOutcome {
  std::optional<GrowRecord> grown;
  std::optional<RecoveryRecord> recovered;
};

// A member's grow after committed step `step` (every member calls it when ew.grow_ticket() != 0).
// Returns the trainer to go on with, over ew.comm(); `old` is released, then the retired world.
std::unique_ptr<Trainer> grow_job(const TrainConfig& config, launch::ElasticWorld& ew, std::unique_ptr<Trainer> old,
                                  const TrainerOptions& original, const BatchSource& batches, GrowOutcome& outcome,
                                  std::chrono::milliseconds timeout);

// The newcomer's side, once ElasticWorld::join admitted it: its trainer, holding its part of the state.
std::unique_ptr<Trainer> join_job(const TrainConfig& config, launch::ElasticWorld& ew, const TrainerOptions& original,
                                  const BatchSource& batches, GrowOutcome& outcome);

// Whether this process is a newcomer that joined (its world came from ElasticWorld::join).
bool joined_as_newcomer(const launch::ElasticWorld& ew);

}  // namespace fsdp::train
