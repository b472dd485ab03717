// The performance targets of the standard comparison (make bench), as ratios between rows of the
// same run: ours against a peer, or against the memcpy bound. fsdp-bench-report evaluates them.
#pragma once

#include <string>
#include <vector>

#include "bench/fsdp_bench/report.h"

namespace fsdp::bench {

struct Target {
  Collective collective;
  size_t bytes;          // the row's size
  std::string ours;      // backend
  std::string versus;    // backend ("memcpy" for the bound)
  bool time_ratio;       // compare time (ours / versus, at most `goal`) instead of busbw (at least `goal`)
  double goal;
  std::string text;      // what the target says, for the table
};

struct Verdict {
  Target target;
  bool measured = false;  // both rows exist and ran
  double ratio = 0;       // busbw ours / versus, or time ours / versus
  double ours = 0, versus = 0;  // the busbw (GB/s) or time (us) compared
  bool met = false;
};

// The targets at 2 ranks: all-gather, reduce-scatter and all-reduce over shm against Open MPI
// and the memcpy bound, TCP against Gloo, and 8-byte all-reduce latency against Open MPI.
std::vector<Target> standard_targets();

// Evaluates each target on the out-of-place rows of whichever report has its collective and size
// (float, sum where there is an op).
std::vector<Verdict> evaluate(const std::vector<Target>& targets, const std::vector<Report>& reports);

}  // namespace fsdp::bench
