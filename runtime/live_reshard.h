// The in-memory counterpart of the checkpoint loader's resharding (docs/fault_tolerance.md): after a
// shrink, the survivors rebuild every unit's master shard and optimizer state at the new world size from
// what they hold of the old one (their own old shard, the other replicas' under HSDP, their buddy mirror
// under plain FSDP: runtime/buddy_mirror.h). After a grow the new world also has newcomers, which hold
// nothing of the old layout and only receive.
//
// For each unit and each old shard j of S (the old shard degree): its holder (shard_holder) broadcasts
// it over the new world (bitwise, no sums), and every survivor takes its new chunk out of the old unit
// laid out whole. A shard that holds padding only (a parameter with fewer rows than ranks) needs no
// holder: it is zeros. The new layout is any mesh over the new world without expert parallelism.
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

// Every copy of some old shard is gone: the caller falls back to a restart from the checkpoint.
class UnrecoverableLoss : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OldShards {
  int64_t old_size = 0;        // the old world: replicate x shard_degree ranks
  std::vector<int> survivors;  // old ranks, ascending; new rank i is survivors[i] unless new_members says
  int64_t steps_taken = 0;     // the committed step count every survivor stands at
  int64_t shard_degree = 0;    // the old shard degree S (old rank r holds shard r % S); 0: old_size
  bool mirrored = true;        // rank r kept a buddy mirror of rank r + 1 of its shard group (plain FSDP)
  // New rank i -> the old rank it was, or -1 for a newcomer (a grow); empty: new rank i is survivors[i].
  // Its old ranks are the survivors, each once.
  std::vector<int> new_members;
  int64_t shards() const { return shard_degree > 0 ? shard_degree : old_size; }
};

// The old rank new rank `new_rank` was, or -1 for a newcomer.
int old_rank_of(const OldShards& old, int new_rank);

// held(unit, old_rank, what): this survivor's copy of old_rank's shard of unit (chunk_numel of the old
// layout) for what = 0 (the master shard) or 1..state_count (optimizer state what - 1), or an empty span
// when it does not hold it. The survivor's own old rank, or the one its mirror mirrors.
using HeldShard = std::function<std::span<const float>(int unit, int old_rank, int what)>;

// Who sends old shard j (every rule in one place): the holder, a survivor, and the old rank whose copy
// it sends (held(unit, owner, what) on the holder). The lowest surviving rank with shard index j in any
// replica (itself the owner); else, where mirrored, the lowest surviving mirror holder of such a rank
// (owner r, holder r's predecessor in its shard group); else none (holder -1).
struct ShardSource {
  int holder = -1;
  int owner = -1;
};
ShardSource shard_source(const OldShards& old, int j);
// Its holder alone: -1 when every copy of old shard j is lost.
inline int shard_holder(const OldShards& old, int j) { return shard_source(old, j).holder; }

// Throws UnrecoverableLoss, the same on every member and before any message, naming each unit and the
// old ranks of it whose every copy is gone. Throws std::invalid_argument where new_world, target or
// target_opt do not match (new_world of survivors.size() ranks, or new_members.size(); target FSDP or
// HSDP over it), and, on
// every survivor, where a designated holder lacks a shard it should hold (one all-reduce decides).
// Collective over new_world; a newcomer's `held` is never asked. Transient memory: one unit's old flat buffer and its
// full tensor at a time. Sets target_opt's steps_taken to old.steps_taken; discards target's prefetched step.
void live_reshard(const OldShards& old, const spec::ModelSpec& model, const HeldShard& held, FsdpModel& target,
                  ShardedOptimizer& target_opt, Communicator& new_world);

}  // namespace fsdp::runtime
