// Rank 0's console and metrics file in fsdp-train's step loop. Under fault_tolerance a survivor that becomes
// rank 0 after rank 0 was lost takes them over (train/train_job.cc's recovery), and first writes the last
// committed step's record when the lost rank 0 died before writing it: between its commit vote and its
// record (in its optimizer step, say), every survivor applied the step, and nobody would have logged it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>

#include "train/metrics.h"

namespace fsdp::train {

struct JobOutput {
  std::ostream* log = nullptr;  // the console, on rank 0 (null elsewhere)
  std::unique_ptr<MetricsLogger> metrics;
  int64_t rank = 0;                // whose files these are (the run report's name): 0 after a takeover
  std::optional<StepRecord> last;  // the last step this rank completed

  void log_step(const StepRecord& r) {
    metrics->log(r);
    last = r;
  }
};

// The survivor that is rank 0 of a new epoch and had no console: takes over `console` and the rank-0
// metrics file (`options`, continued), then writes the record of step `committed` when the file lacks it.
void take_over_rank0_output(JobOutput& out, std::ostream* console, MetricsOptions options, int64_t committed);

}  // namespace fsdp::train
