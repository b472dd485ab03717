// Per-step training metrics: TorchTitan's console line (field names, order, widths and decimals of its
// components/metrics.py, v0.2.x; our extras after them) and a machine-readable record per step (JSONL,
// or CSV when the file name ends in ".csv"; schema in docs/training.md), plus an end-of-run summary.
// One logger per rank; not thread-safe (the training loop's thread calls it).
//
//   step:  2  loss:  5.43210  grad_norm:  1.2345  memory:  0.05GiB(0.30%)  tps: 12,345  tflops: 0.01  mfu: 0.12%
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <limits>
#include <string>

namespace fsdp::train {

// What the training loop measured in one optimizer step on this rank.
struct StepRecord {
  int64_t step = 0;           // 1-based
  double loss = 0;            // mean over the global batch (same on every rank)
  double grad_norm = 0;       // global L2 norm before clipping
  double lr = 0;              // learning rate the step used
  int64_t tokens = 0;         // tokens this rank processed: local_batch_size x seq_len x accumulation steps
  double step_seconds = 0;    // wall time of the whole step
  int64_t memory_bytes = 0;   // this rank's peak tracked bytes during the step
  bool skipped = false;       // non-finite loss or grad norm: the optimizer step was skipped
  // Of the step's collectives' flight time, the share the training thread spent computing (0..1);
  // NaN: no collective was timed.
  double comm_hidden = std::numeric_limits<double>::quiet_NaN();
};

// Something that happened between steps, written to the JSONL file as its own line (never to CSV):
//   {"event":"checkpoint","step":10,"rank":0,"elapsed_s":1.5,"detail":"step-10"}
// Kinds: "checkpoint" (a save was started after `step`), "recovery" (the job lost or regained ranks and
// went on from the end of `step`; detail says who and the new world size). Readers tell the two kinds of
// line apart by the "event" key.
struct EventRecord {
  std::string kind;
  int64_t step = 0;  // the last step completed when it happened
  std::string detail;
};

struct MetricsOptions {
  int64_t rank = 0;
  int64_t log_freq = 1;                 // console line every log_freq steps, plus the first logged step
  double flops_per_token = 0;           // training FLOPs per token (sharding::model_flops_per_token)
  double peak_flops = 0;                // chip peak FLOP/s in the compute dtype; 0: mfu prints 0
  double memory_capacity_bytes = 0;     // job_memory_capacity(); 0: the memory percentage prints 0
  int64_t planned_memory_bytes = 0;     // the planner's predicted peak for this rank; 0: unknown
  std::string file;                     // per-step records; empty: none
  std::ostream* out = nullptr;          // console; nullptr: std::cout
  bool print = true;                    // false: file only (ranks other than 0)
  bool append = false;                  // continue the file (a survivor taking over from a lost rank 0)
};

// Numbers derived from a record and the options (per rank, like TorchTitan's).
struct DerivedMetrics {
  double tps = 0;         // tokens / step_seconds
  double tflops = 0;      // flops_per_token x tps / 1e12
  double mfu_pct = 0;     // 100 x achieved / peak_flops
  double memory_gib = 0;  // memory_bytes / 2^30
  double memory_pct = 0;  // 100 x memory_bytes / memory_capacity_bytes
};

// The steps since the last console line, as TorchTitan averages them: tps (and so tflops and mfu) is
// their tokens over their time, memory their peak.
struct LogInterval {
  int64_t tokens = 0;
  double seconds = 0;
  int64_t peak_memory_bytes = 0;

  void add(const StepRecord& r);
  static LogInterval of(const StepRecord& r);
};

struct MetricsSummary {
  int64_t steps = 0;          // records logged
  int64_t skipped_steps = 0;
  double mean_tps = 0;        // total tokens / total step time, leaving out the first record (warm-up) when
                              // there are two or more
  int64_t peak_memory_bytes = 0;
  double final_loss = 0;      // of the last step that was not skipped; NaN if none
  double elapsed_seconds = 0; // wall time since the logger was created
};

class MetricsLogger {
 public:
  // Creates the file's folder and truncates the file (CSV gets its header). Throws std::runtime_error
  // naming the path when it cannot be opened.
  explicit MetricsLogger(MetricsOptions options);

  // Appends the record to the file (flushed, so a crash keeps what was logged) and prints the console
  // line on log steps and on skipped steps.
  void log(const StepRecord& r);
  // Appends the event to a JSONL file (flushed); no-op for CSV or no file.
  void log_event(const EventRecord& e);
  const std::string& file() const { return options_.file; }

  DerivedMetrics derive(const StepRecord& r) const;
  DerivedMetrics derive(const LogInterval& interval) const;
  // The console line for step r ending `interval` (r included), no newline; without an interval, r alone.
  std::string format_line(const StepRecord& r, const LogInterval& interval) const;
  std::string format_line(const StepRecord& r) const { return format_line(r, LogInterval::of(r)); }
  std::string json_record(const StepRecord& r) const;  // one JSON object, no newline
  std::string json_event(const EventRecord& e) const;  // one JSON object, no newline
  std::string csv_record(const StepRecord& r) const;   // one CSV row, no newline
  static std::string csv_header();

  MetricsSummary summary() const;
  // "summary: steps: 20 (skipped 0)  mean tps: 12,345  peak memory: 0.05GiB(0.30%)  final loss: 2.3456
  //  elapsed: 1.23s"
  std::string format_summary() const;
  void print_summary();

 private:
  bool should_print(const StepRecord& r) const;
  std::ostream& out() const;

  MetricsOptions options_;
  bool csv_ = false;
  std::ofstream file_;
  std::chrono::steady_clock::time_point start_;
  MetricsSummary summary_;
  LogInterval since_last_line_;
  int64_t tokens_after_first_ = 0;
  double seconds_after_first_ = 0;
  int64_t first_tokens_ = 0;
  double first_seconds_ = 0;
};

// "1,234,567"
std::string with_thousands(int64_t v);
// Python's format of a float, f"{v:{width}.{decimals}f}" or with `thousands` f"{v:{width},.{decimals}f}":
// right-aligned, "nan"/"inf" as Python writes them (never "-nan").
std::string python_fixed(double v, int width, int decimals, bool thousands = false);
// The file a rank writes with metrics.save_for_all_ranks: rank 0 keeps `path`, rank r > 0 writes
// "dir/name.rank<r>.ext".
std::string metrics_file_for_rank(const std::string& path, int64_t rank);

}  // namespace fsdp::train
