// How fsdp-train says a recovery or a grow (docs/fault_tolerance.md, "Observability"): once the first step
// after it finished (that step's time is part of the line), one line on rank 0's console, an event in
// metrics.jsonl and a span in the trace.
#pragma once

#include <memory>
#include <optional>
#include <ostream>

#include "train/job_grow.h"
#include "train/job_observers.h"
#include "train/job_output.h"
#include "train/job_recovery.h"
#include "train/metrics.h"
#include "train/train_job.h"

namespace fsdp::train {

// `rank`: this rank in the job's current epoch (rank 0 prints).
void announce_recovery(const RecoveryRecord& record, int rank, JobOutput& out, JobObservers& observers);
// A recovery done (or a grow turned into one): where rank 0 was lost, its successor takes over the output
// (job.console, rank 0's metrics as `config` sets them); a recovery not yet said is said now, `record` once
// the first step after it is done (`recovered` holds it until then).
void note_recovery(const TrainConfig& config, const JobOptions& job, JobOutput& out, JobObservers& observers,
                   RecoveryRecord record, std::optional<RecoveryRecord>& recovered);
// Times the grow's first step (`step_seconds`), says it, and forgets it.
void announce_grow(std::optional<GrowRecord>& grown, double step_seconds, int rank, JobOutput& out,
                   JobObservers& observers);

}  // namespace fsdp::train
