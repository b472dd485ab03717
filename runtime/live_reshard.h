// The in-memory counterpart of the checkpoint loader's resharding (docs/fault_tolerance.md): after a
// shrink, the survivors rebuild every unit's master shard and optimizer state at the new world size from
// what they hold of the old one (their own old shard and their buddy mirror, runtime/buddy_mirror.h).
// After a grow the new world also has newcomers, which hold nothing of the old layout and only receive.
//
// For each unit and each old shard j of N: the holder is j if it survived, else its mirror holder
// (j - 1 + N) % N if that survived; it broadcasts the shard over the new world (bitwise, no sums), and
// every survivor takes its new chunk out of the old unit laid out whole. A shard that holds padding
// only (a parameter with fewer rows than ranks) needs no holder: it is zeros.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/fsdp_model.h"
#include "runtime/optimizer.h"
#include "spec/model_spec.h"

namespace fsdp::runtime {

// Both copies of some old shard are gone: the caller falls back to a restart from the checkpoint.
class UnrecoverableLoss : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OldShards {
  int64_t old_size = 0;
  std::vector<int> survivors;  // old ranks, ascending; new rank i is survivors[i] unless new_members says
  int64_t steps_taken = 0;     // the committed step count every survivor stands at
  // New rank i -> the old rank it was, or -1 for a newcomer (a grow); empty: new rank i is survivors[i].
  // Its old ranks are the survivors, each once.
  std::vector<int> new_members;
};

// The old rank new rank `new_rank` was, or -1 for a newcomer.
int old_rank_of(const OldShards& old, int new_rank);

// held(unit, old_rank, what): this survivor's copy of old_rank's shard of unit (chunk_numel of the old
// layout) for what = 0 (the master shard) or 1..state_count (optimizer state what - 1), or an empty span
// when it does not hold it.
using HeldShard = std::function<std::span<const float>(int unit, int old_rank, int what)>;

// Which survivor (old rank) holds old shard j: j, else its mirror holder, else -1.
int shard_holder(const OldShards& old, int j);

// Throws UnrecoverableLoss, the same on every member and before any message, naming each unit and the
// old ranks of it whose both copies are gone. Throws std::invalid_argument where new_world, target or
// target_opt do not match (new_world of survivors.size() ranks, or new_members.size(); target plain FSDP
// over it), and, on
// every survivor, where a designated holder lacks a shard it should hold (one all-reduce decides).
// Collective over new_world; a newcomer's `held` is never asked. Transient memory: one unit's old flat buffer and its
// full tensor at a time. Sets target_opt's steps_taken to old.steps_taken; discards target's prefetched step.
void live_reshard(const OldShards& old, const spec::ModelSpec& model, const HeldShard& held, FsdpModel& target,
                  ShardedOptimizer& target_opt, Communicator& new_world);

}  // namespace fsdp::runtime
