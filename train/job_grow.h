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
// Both sync the new mirrors, so the redundancy covers the newcomer from its first step.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launch/elastic_world.h"
#include "train/config.h"
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

// A member's grow after committed step `step` (every member calls it when ew.grow_ticket() != 0).
// Returns the trainer to go on with, over ew.comm(); `old` is released, then the retired world.
std::unique_ptr<Trainer> grow_job(const TrainConfig& config, launch::ElasticWorld& ew, std::unique_ptr<Trainer> old,
                                  const TrainerOptions& original, const BatchSource& batches, GrowRecord& record,
                                  std::chrono::milliseconds timeout);

// The newcomer's side, once ElasticWorld::join admitted it: its trainer, holding its part of the state.
std::unique_ptr<Trainer> join_job(const TrainConfig& config, launch::ElasticWorld& ew, const TrainerOptions& original,
                                  const BatchSource& batches,
                                  GrowRecord& record);

// Whether this process is a newcomer that joined (its world came from ElasticWorld::join).
bool joined_as_newcomer(const launch::ElasticWorld& ew);

}  // namespace fsdp::train
