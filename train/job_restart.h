// A job started again by `fsdp-run --max-restarts` (FSDP_RESTART_COUNT > 0): what its rank 0 says and
// metrics.jsonl records about the restart, and the fault hook its test kills a rank with.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "runtime/checkpoint/checkpointer.h"
#include "train/metrics.h"

namespace fsdp::train {

// "restart 1 of 2 after rank 1 was killed by signal 9 (SIGKILL); resumed from step 4" (or "...; no
// checkpoint saved yet: started again from step 0"); empty on the job's first start.
// `resumed_step` is the step a checkpoint was loaded at, 0 when none was.
std::string restart_detail(int64_t resumed_step, bool checkpoints_enabled);

// On a restarted start: restart_detail as a line on `log` ("fsdp-train: restart 1 of 2 ...") and as a
// "recovery" event at `resumed_step` in metrics.jsonl. Nothing on the first start.
void announce_restart(int64_t resumed_step, bool checkpoints_enabled, MetricsLogger& metrics, std::ostream* log);

// Where in step STEP a fault-injected rank dies: after the step (and its checkpoint save), or, with a
// commit vote (fault_tolerance), just before voting (its redundancy already sent) or just after it; or,
// instead of dying, freezes itself after the step (SIGSTOP, as a hung host) until someone sends SIGCONT.
enum class KillPoint { kAfterStep, kBeforeVote, kAfterVote, kStopAfterStep, kInvalid };

// FSDP_FAULT_KILL_AFTER_STEP=RANK:STEP[:after|before_vote|after_vote|stop][,...] on the job's first start: true
// when one entry names this rank (as launched), `step` and `point`. Throws std::invalid_argument naming the
// variable when an entry is malformed.
bool fault_kill_due(int rank, int64_t step, KillPoint point = KillPoint::kAfterStep);

// When fault_kill_due: waits for `ckpt`'s save in flight (when not null), then SIGKILLs this process, as
// a lost rank dies.
void kill_self_if_due(int rank, int64_t step, runtime::checkpoint::Checkpointer* ckpt,
                      KillPoint point = KillPoint::kAfterStep);

}  // namespace fsdp::train
