// A job started again by `fsdp-run --max-restarts` (FSDP_RESTART_COUNT > 0): what its rank 0 says and
// metrics.jsonl records about the restart, and the fault hook its tests kill a rank with after a step.
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

// Fault injection after step `step` (common/fault_injection.h's `after` and `stop`): when due, waits for
// `ckpt`'s save in flight (when not null), then SIGKILLs this process, as a lost rank dies; or freezes it.
void kill_self_if_due(int64_t step, runtime::checkpoint::Checkpointer* ckpt);

}  // namespace fsdp::train
