// The sweep: for each size, type and op, time the backend's call out of place and in place, check
// the result, and combine the ranks' numbers into one row (nccl-tests' procedure).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench/fsdp_bench/backend.h"
#include "bench/fsdp_bench/options.h"

namespace fsdp::bench {

// One placement (out of place or in place) of one row.
struct Measurement {
  bool ran = false;
  std::string skipped;      // why it did not run (unsupported type, no in-place form)
  double time_us = 0;       // -z 1: median of the timed iterations; -z 0: total / iterations; then -a
  double iter_min_us = -1;  // -z 1: fastest and slowest single iteration on any rank; -1 otherwise
  double iter_max_us = -1;
  double algbw = 0;         // GB/s: bytes / time
  double busbw = 0;         // GB/s: algbw * bus_factor
  long long wrong = -1;     // elements wrong over every rank and checked run; -1: not checked
};

struct Row {
  std::string backend;
  Collective collective;
  size_t bytes = 0;  // count * element size: the size column
  size_t count = 0;
  DataType type;
  bool has_op = false;
  ReduceKind op = ReduceKind::kSum;
  int root = -1;  // -1 where the collective has none
  Measurement out_of_place, in_place;
};

// The run's page-aligned send and receive buffers, sized for the largest row and reused throughout.
class Buffers {
 public:
  Buffers(size_t bytes, bool huge_pages);
  ~Buffers();
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  std::byte* send() { return send_; }
  std::byte* recv() { return recv_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::byte* send_ = nullptr;
  std::byte* recv_ = nullptr;
};

// Bytes each buffer needs for the options' largest row (the memcpy bound copies up to
// max_bytes * bus factor).
size_t buffer_bytes(const Options& o, int nranks);

// The reduction bound's backend name (rows of reduce_scatter, all_reduce and reduce, fp32/fp64).
inline constexpr const char* kAddBound = "add";

// Measures every row of the sweep on each backend in turn, row by row, so that every backend and
// the memcpy bound see the same moment of a noisy machine. The memcpy bound (when
// `memcpy_control` is given) has every rank at once copy size * bus factor bytes with memcpy: what
// a rank must receive, so its busbw is the copy bandwidth; `memcpy_control` lines the ranks up and
// combines their times like any backend's. For the reducing collectives the add bound follows it:
// every rank at once runs x[i] += y[i] over the same bytes (fp32 and fp64 rows).
std::vector<Row> run_interleaved(const Options& o, const std::vector<Backend*>& backends, Backend* memcpy_control,
                                 Buffers& buffers);

}  // namespace fsdp::bench
