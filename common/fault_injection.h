// Fault injection for the fault-tolerance tests (docs/fault_tolerance.md#fault-injection): where a rank of
// fsdp-train dies. FSDP_FAULT_KILL_AFTER_STEP=RANK:STEP[:WHEN][,...] names the rank (as launched), the step
// and the point; the job arms it once, the trainer says which step it is in, and each hook in the code of
// a phase costs one relaxed load when nothing is armed:
//
//   fault::arm(launched_rank);               // fsdp-train at start: parses the variable (not on a restart)
//   fault::set_step(step);                   // Trainer::step
//   fault::point(fault::When::kInMirror);    // in that phase's code: SIGKILLs this process when due
//
// One rank per process: a process whose threads play several ranks arms nothing (the variable is unset).
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

namespace fsdp::fault {

// The WHEN word of an entry; `after` when omitted.
enum class When : uint8_t {
  kAfterStep,     // after: once step STEP and its checkpoint save are done
  kStop,          // stop: after the step, SIGSTOP instead of SIGKILL (a hung host), until SIGCONT
  kBeforeVote,    // before_vote: its redundancy sent, just before its commit vote
  kAfterVote,     // after_vote: just after its vote (every member voted: the step is kept)
  kInForward,     // in_forward: the middle unit's all-gather posted (by the prefetch), not yet waited on
  kInBackward,    // in_backward: the middle unit's gradient reduce-scatter posted, not yet waited on
  kInOptimizer,   // in_optimizer: after the vote, the units up to the middle one updated, the rest not
  kInMirror,      // in_mirror: the buddy mirror's gradient exchange posted both ways, not waited on
  kInCheckpoint,  // in_checkpoint: step STEP's save, its shard file written, before the commit
  kInRecovery,    // in_recovery: in the recovery from a failure in step STEP, agreed and reconnected,
                  // before the shards are rebuilt (a failure during recovery)
  kInGrow,        // in_grow: in the grow after step STEP (its commit admitted a newcomer), agreed and
                  // reconnected, before the shards move; a member or the newcomer (a failure during a grow)
};

// "in_forward" for kInForward.
std::string_view name(When when);

namespace detail {
extern std::atomic<bool> g_armed;
void hit(When when, int64_t step);
}  // namespace detail

// Parses FSDP_FAULT_KILL_AFTER_STEP and keeps the entries naming `launched_rank`; arms nothing when the
// variable is unset or on a restarted start (FSDP_RESTART_COUNT > 0). Throws std::invalid_argument naming
// the variable when an entry is malformed.
void arm(int launched_rank);
// Forgets what arm() kept (tests).
void disarm();
inline bool armed() { return detail::g_armed.load(std::memory_order_relaxed); }

// The step the job is in, for the hooks that do not know it.
void set_step(int64_t step);
int64_t current_step();

// Whether an armed entry names `when` at `step`.
bool due(When when, int64_t step);

// When due: one line on stderr naming the rank, the point and the step, then SIGKILL (SIGSTOP for kStop,
// which returns once the process is continued).
inline void point(When when, int64_t step) {
  if (armed()) detail::hit(when, step);
}
inline void point(When when) {
  if (armed()) detail::hit(when, current_step());
}

}  // namespace fsdp::fault
