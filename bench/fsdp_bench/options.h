// fsdp-bench's command line: nccl-tests' flags (same letters, same long names, same defaults), the
// backends to compare, the output files, and the launch flags every fsdp program takes.
//
//   fsdp-bench all_gather -b 1K -e 64M -f 4 -d float --backend shm,mpi-native --json out.json
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "bench/fsdp_bench/collective.h"
#include "common/dtype.h"
#include "collectives/types/reduce_op.h"
#include "launch/cli_flags.h"

namespace fsdp::bench {

// How per-rank times become the row's time (-a): nccl-tests' 0 rank 0, 1 mean, 2 min, 3 max.
enum class Aggregation { kRank0 = 0, kMean = 1, kMin = 2, kMax = 3 };

struct Options {
  Collective collective = Collective::kAllReduce;
  size_t min_bytes = 32ull << 20;  // -b
  size_t max_bytes = 32ull << 20;  // -e
  size_t step_bytes = 1ull << 20;  // -i, used when the step factor is 1
  double step_factor = 1;          // -f
  int iters = 20;                  // -n
  int warmup_iters = 5;            // -w
  int check_iters = 1;             // -c: checked runs per row, 0 disables the check (#wrong N/A)
  std::vector<DataType> types{DataType::kFloat32};     // -d
  // -d mxfp8 (all_gather only): bfloat16 rows, each of our backends run twice, as itself and as
  // "<name>-mxfp8" (the same bf16 data sent as MXFP8, 33/64 of the bytes), row by row in one run.
  bool mxfp8 = false;
  std::vector<ReduceKind> ops{ReduceKind::kSum};       // -o
  int root = 0;                                        // -r
  Aggregation aggregation = Aggregation::kMean;        // -a
  bool blocking = false;                               // -z: wait for every op before the next
  std::vector<std::string> backends{"shm"};            // --backend, in run order
  bool memcpy_bound = true;                            // --memcpy 0 drops the bound
  bool huge_pages = false;                             // --thp: madvise(MADV_HUGEPAGE) on the buffers
  int registration = 0;  // -R (nccl-tests' local_register): 1 or 2 put our backends' buffers in shared windows
  std::string json_path;                               // --json
  std::string plot_path;                               // --plot (.svg)
  launch::LaunchFlags launch;                          // --rank, --world-size, --master-*
};

// Every backend name --backend accepts, in the order "all" runs them.
const std::vector<std::string>& known_backends();

// The suffix of a backend that sends all-gathers as MXFP8 ("shm-mxfp8"), and its transport's name.
inline constexpr std::string_view kMxfp8Suffix = "-mxfp8";
bool is_mxfp8_backend(std::string_view name);
std::string_view mxfp8_base(std::string_view name);

// Parses argv without the program name. Throws fsdp::InvalidArgument with a message that names the
// flag, the bad value and what would be accepted. "--help" throws HelpRequested.
Options parse_options(std::vector<std::string> args);
struct HelpRequested {};
std::string usage();

// The sizes a sweep visits: min, then times the factor (or plus the step) while not above max.
std::vector<size_t> sweep_sizes(const Options& o);

// "1K" -> 1024, "64M", "2G"; throws InvalidArgument naming `flag`.
size_t parse_size(const std::string& flag, const std::string& text);

}  // namespace fsdp::bench
