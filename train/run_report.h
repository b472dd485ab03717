// The picture of a run: report.html beside metrics.jsonl, one self-contained page (inline SVG charts
// drawn by common/svg_chart.h; no script, font or network) of loss, grad norm, tokens/s, memory against
// the planner's prediction and the hidden share of communication per step, with checkpoints, recoveries
// and skipped steps marked. It is made from the JSONL file alone (schema in docs/training.md), so
// fsdp-train, the Python trainer (through fsdp_runtime._C) and fsdp-report (an existing file, offline)
// draw the same page.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

namespace fsdp::train {

class MetricsLogger;

// One step line of metrics.jsonl; NaN where the line has no value (null, or a field older files lack).
struct RunStep {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  int64_t step = 0;
  double loss = kNone, grad_norm = kNone, tps = kNone;
  double memory_bytes = kNone, planned_memory_bytes = kNone;
  double comm_hidden = kNone;  // 0..1
  bool skipped = false;
};

// One event line ({"event": kind, "step", "detail"}: train/metrics.h's EventRecord).
struct RunEvent {
  std::string kind;
  int64_t step = 0;
  std::string detail;
};

struct RunRecords {
  std::vector<RunStep> steps;
  std::vector<RunEvent> events;
  int64_t unreadable_lines = 0;  // not JSON, or without a step (a line cut short by a crash)
};

RunRecords read_run_records(std::istream& jsonl);

// The whole page; `source` names the file it was made from (its title).
std::string run_report_html(const RunRecords& run, const std::string& source);

// Reads `metrics_file`, writes `report_file` (through a temporary and a rename: a reader never sees half
// a page). Returns "" on success, else what failed.
std::string write_run_report(const std::string& metrics_file, const std::string& report_file);

// Where the report of a metrics file goes: "report.html" in its folder, "report.rank<r>.html" for rank
// r > 0 (metrics.save_for_all_ranks); "" for a CSV file or none (the report reads JSONL).
std::string run_report_file(const std::string& metrics_file, int64_t rank);

// The report of `metrics`' file, rewritten now (at each checkpoint and at the end of a run, so a run
// that dies still has the page of its last save). A failure is a warning on `log` (when set), never
// the run's end. Returns the report's path ("" when there is none).
std::string refresh_run_report(const MetricsLogger& metrics, int64_t rank, std::ostream* log);

}  // namespace fsdp::train
