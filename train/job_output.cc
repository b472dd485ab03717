#include "train/job_output.h"

#include <algorithm>
#include <fstream>

#include "train/run_report.h"

namespace fsdp::train {
namespace {

// Whether the JSONL metrics file holds a record of `step` (a CSV file is not read: assumed to).
bool file_holds_step(const std::string& file, int64_t step) {
  if (run_report_file(file, 0).empty()) return true;
  std::ifstream in(file);
  const RunRecords run = read_run_records(in);
  return std::any_of(run.steps.begin(), run.steps.end(), [step](const RunStep& s) { return s.step == step; });
}

}  // namespace

void take_over_rank0_output(JobOutput& out, std::ostream* console, MetricsOptions options, int64_t committed) {
  out.log = console;
  out.rank = 0;
  options.append = true;
  out.metrics = std::make_unique<MetricsLogger>(options);
  // Rank 0 writes step s before it votes on s + 1, so at most the last committed step is missing.
  if (out.last && out.last->step == committed && !file_holds_step(options.file, committed)) {
    out.metrics->log(*out.last);
  }
}

}  // namespace fsdp::train
