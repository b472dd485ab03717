// fsdp-report METRICS.jsonl [OUT.html]: the run report (train/run_report.h) of an existing metrics file,
// for a run that wrote none, or while one runs. OUT defaults to report.html beside the file. Exit 0 with
// the page written, 2 when the file cannot be read or the page not written.
#include <cstdio>
#include <cstring>
#include <string>

#include "train/run_report.h"

int main(int argc, char** argv) {
  const bool help = argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0);
  if (help || argc < 2 || argc > 3) {
    std::fprintf(help ? stdout : stderr,
                 "usage: fsdp-report METRICS.jsonl [OUT.html]\n"
                 "  Draws loss, grad norm, tokens/s, memory against the planner's prediction and the hidden share\n"
                 "  of communication per step, with checkpoints, recoveries and skipped steps marked, as one\n"
                 "  self-contained HTML page (default: report.html beside METRICS.jsonl). docs/training.md.\n");
    return help ? 0 : 2;
  }
  const std::string metrics = argv[1];
  if (fsdp::train::run_report_file(metrics, 0).empty()) {
    std::fprintf(stderr,
                 "fsdp-report: '%s' is CSV; the report reads the JSONL records (metrics.file = 'metrics.jsonl')\n",
                 metrics.c_str());
    return 2;
  }
  const std::string out = argc == 3 ? argv[2] : fsdp::train::run_report_file(metrics, 0);
  const std::string error = fsdp::train::write_run_report(metrics, out);
  if (!error.empty()) {
    std::fprintf(stderr, "fsdp-report: %s\n", error.c_str());
    return 2;
  }
  std::printf("fsdp-report: %s\n", out.c_str());
  return 0;
}
