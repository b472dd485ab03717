#include "train/job_announce.h"

#include <cstdio>

namespace fsdp::train {
namespace {

void announce(const std::string& kind, const std::string& line, const std::string& more, int64_t step, int64_t epoch,
              std::chrono::steady_clock::time_point start, double seconds, int rank, JobOutput& out,
              JobObservers& observers) {
  if (rank == 0 && out.log) *out.log << "fsdp-train: " << line << "\n" << std::flush;
  out.metrics->log_event({kind, step, line + more});
  if (observers.tracing) {
    observers.trace.complete(Track::kCompute, kind + " (epoch " + std::to_string(epoch) + ")", to_us(start),
                             seconds * 1e6);
  }
}

}  // namespace

void announce_recovery(const RecoveryRecord& r, int rank, JobOutput& out, JobObservers& observers) {
  char detected[48];  // the detection's wall-clock time, which make bench-recovery lines up with the kill's
  std::snprintf(detected, sizeof(detected), "; detected at unix %.6f", r.detected_unix);
  announce("recovery", r.line(), detected, r.resumed_after, r.epoch, r.detected, r.recovery_seconds(), rank, out,
           observers);
}

void note_recovery(const TrainConfig& config, const JobOptions& job, JobOutput& out, JobObservers& observers,
                   RecoveryRecord record, std::optional<RecoveryRecord>& recovered) {
  const int rank = job.elastic->rank();
  if (rank == 0 && out.log == nullptr && job.console != nullptr) {
    take_over_rank0_output(out, job.console, job_metrics_options(config, 0, job.console), record.resumed_after);
  }
  if (recovered) announce_recovery(*recovered, rank, out, observers);
  recovered = std::move(record);
}

void announce_grow(std::optional<GrowRecord>& grown, double step_seconds, int rank, JobOutput& out,
                   JobObservers& observers) {
  grown->first_step_seconds = step_seconds;
  announce("grow", grown->line(), "", grown->after_step, grown->epoch, grown->started, grown->grow_seconds(), rank, out,
           observers);
  grown.reset();
}

}  // namespace fsdp::train
