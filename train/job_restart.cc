#include "train/job_restart.h"

#include "common/fault_injection.h"
#include "common/knobs.h"

namespace fsdp::train {

std::string restart_detail(int64_t resumed_step, bool checkpoints_enabled) {
  const int64_t count = knobs::kRestartCount.get();
  if (count == 0) return "";
  std::string d = "restart " + std::to_string(count) + " of " + std::to_string(knobs::kMaxRestarts.get());
  const std::string cause = knobs::kRestartCause.get();
  if (!cause.empty()) d += " after " + cause;
  if (resumed_step > 0) return d + "; resumed from step " + std::to_string(resumed_step);
  const char* why = checkpoints_enabled ? "; no checkpoint saved yet" : "; checkpoint.enable is false";
  return d + why + ": started again from step 0";
}

void announce_restart(int64_t resumed_step, bool checkpoints_enabled, MetricsLogger& metrics, std::ostream* log) {
  const std::string detail = restart_detail(resumed_step, checkpoints_enabled);
  if (detail.empty()) return;
  if (log) *log << "fsdp-train: " << detail << "\n";
  metrics.log_event({"recovery", resumed_step, detail});
}

void kill_self_if_due(int64_t step, runtime::checkpoint::Checkpointer* ckpt) {
  if (!fault::armed()) return;
  // The save is done first, as the test's "after step STEP's checkpoint" promises.
  if (ckpt && fault::due(fault::When::kAfterStep, step)) ckpt->wait();
  fault::point(fault::When::kStop, step);
  fault::point(fault::When::kAfterStep, step);
}

}  // namespace fsdp::train
