// What one fsdp-bench run found, and its two renderings: the nccl-tests table on stdout and the
// --json document (schema "fsdp-bench/1", documented in docs/benchmarks.md).
#pragma once

#include <string>
#include <vector>

#include "bench/fsdp_bench/options.h"
#include "bench/fsdp_bench/runner.h"

namespace fsdp::bench {

struct RankInfo {
  int rank = 0;
  int pid = 0;
  std::string host;
  std::string cpus;  // the CPUs the rank may run on, e.g. "1" when pinned
};

struct BackendInfo {
  std::string name;
  std::string describe;     // empty when unavailable
  std::string unavailable;  // why it did not run; empty when it did
};

struct Machine {
  std::string cpu_model;  // lscpu's "Model name"
  int cpus = 0;
  std::string kernel;  // uname -r
  std::string hostname;
};

struct Report {
  std::string command;  // the command line as given
  Options options;
  int nranks = 1;
  Machine machine;
  std::vector<RankInfo> ranks;
  std::vector<BackendInfo> backends;  // in run order; the memcpy bound last, named "memcpy"
  std::vector<Row> rows;
};

Machine this_machine();
// The CPUs this process may run on, as a list like "0-1" or "1".
std::string cpu_affinity();

// The preamble (once), before any backend's table.
std::string format_preamble(const Report& r);
// One backend's table with its header and footer, or the line saying why it is unavailable.
std::string format_backend(const Report& r, const BackendInfo& b);
// The whole run as JSON, and back (for fsdp-bench-report; throws std::runtime_error on documents
// that break the schema).
std::string format_json(const Report& r);
Report report_from_json(const std::string& text);

// Totals over one backend's rows: nccl-tests' footer.
struct Summary {
  long long wrong = 0;  // -1 when nothing was checked
  double avg_busbw = 0;
  int measured = 0;
};
Summary summarize(const Report& r, const std::string& backend);

}  // namespace fsdp::bench
