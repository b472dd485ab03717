#include "train/job_restart.h"

#include <csignal>
#include <cstdio>
#include <stdexcept>

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

bool fault_kill_due(int rank, int64_t step) {
  const std::string spec = knobs::kFaultKillAfterStep.get();
  if (spec.empty() || knobs::kRestartCount.get() != 0) return false;
  long long want_rank = -1, want_step = -1;
  char tail = 0;
  if (std::sscanf(spec.c_str(), "%lld:%lld%c", &want_rank, &want_step, &tail) != 2 || want_rank < 0 || want_step < 1) {
    throw std::invalid_argument(std::string(knobs::kFaultKillAfterStep.env) + "='" + spec +
                                "': wants RANK:STEP, e.g. 1:4 (rank 1 SIGKILLs itself after step 4)");
  }
  return want_rank == rank && want_step == step;
}

void announce_restart(int64_t resumed_step, bool checkpoints_enabled, MetricsLogger& metrics, std::ostream* log) {
  const std::string detail = restart_detail(resumed_step, checkpoints_enabled);
  if (detail.empty()) return;
  if (log) *log << "fsdp-train: " << detail << "\n";
  metrics.log_event({"recovery", resumed_step, detail});
}

void kill_self_if_due(int rank, int64_t step, runtime::checkpoint::Checkpointer* ckpt) {
  if (!fault_kill_due(rank, step)) return;
  if (ckpt) ckpt->wait();  // the save is done, as the test's "after step STEP's checkpoint" promises
  std::raise(SIGKILL);
}

}  // namespace fsdp::train
