#include "train/job_restart.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
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

bool fault_kill_due(int rank, int64_t step, KillPoint point) {
  const std::string spec = knobs::kFaultKillAfterStep.get();
  if (spec.empty() || knobs::kRestartCount.get() != 0) return false;
  bool due = false;
  size_t begin = 0;
  while (begin <= spec.size()) {  // RANK:STEP[:WHEN], comma-separated
    const size_t end = std::min(spec.find(',', begin), spec.size());
    const std::string one = spec.substr(begin, end - begin);
    long long want_rank = -1, want_step = -1;
    char when[16] = "after";
    char tail = 0;
    const int n = std::sscanf(one.c_str(), "%lld:%lld:%15[a-z_]%c", &want_rank, &want_step, when, &tail);
    const KillPoint want = std::string(when) == "after"         ? KillPoint::kAfterStep
                           : std::string(when) == "before_vote" ? KillPoint::kBeforeVote
                           : std::string(when) == "after_vote"  ? KillPoint::kAfterVote
                           : std::string(when) == "stop"        ? KillPoint::kStopAfterStep
                                                                : KillPoint::kInvalid;
    if (n < 2 || n > 3 || want_rank < 0 || want_step < 1 || want == KillPoint::kInvalid) {
      throw std::invalid_argument(std::string(knobs::kFaultKillAfterStep.env) + "='" + spec +
                                  "': wants RANK:STEP[:after|before_vote|after_vote|stop][,...], e.g. 1:4 (rank 1 "
                                  "SIGKILLs itself after step 4)");
    }
    due = due || (want_rank == rank && want_step == step && want == point);
    begin = end + 1;
  }
  return due;
}

void announce_restart(int64_t resumed_step, bool checkpoints_enabled, MetricsLogger& metrics, std::ostream* log) {
  const std::string detail = restart_detail(resumed_step, checkpoints_enabled);
  if (detail.empty()) return;
  if (log) *log << "fsdp-train: " << detail << "\n";
  metrics.log_event({"recovery", resumed_step, detail});
}

void kill_self_if_due(int rank, int64_t step, runtime::checkpoint::Checkpointer* ckpt, KillPoint point) {
  if (point == KillPoint::kAfterStep && fault_kill_due(rank, step, KillPoint::kStopAfterStep)) {
    std::fprintf(stderr, "fsdp-train: fault injection: rank %d (pid %d) stops itself (SIGSTOP) after step %lld\n", rank,
                 static_cast<int>(::getpid()), static_cast<long long>(step));
    std::fflush(stderr);
    std::raise(SIGSTOP);
    return;
  }
  if (!fault_kill_due(rank, step, point)) return;
  // When it died, for the recovery benchmark (detect = the survivors' detected_unix minus this).
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "fsdp-train: fault injection: rank %d SIGKILLs itself in step %lld at unix %.6f\n", rank,
               static_cast<long long>(step), now);
  std::fflush(stderr);
  if (ckpt) ckpt->wait();  // the save is done, as the test's "after step STEP's checkpoint" promises
  std::raise(SIGKILL);
}

}  // namespace fsdp::train
