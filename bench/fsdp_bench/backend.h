// What fsdp-bench measures: one way of running collectives between the ranks of the job. The same
// runner drives every backend (our transports through the Communicator, Open MPI's own collectives,
// Gloo's algorithms), so they are timed and checked identically in one run.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "bench/fsdp_bench/collective.h"
#include "common/dtype.h"
#include "collectives/types/reduce_op.h"

namespace fsdp::bench {

// One call. In place, send and recv alias as nccl-tests lays them out (Geometry::in_place_offset).
struct CallArgs {
  Collective collective;
  DataType type;
  ReduceKind op;
  int root;
  const std::byte* send;
  std::byte* recv;
  size_t param_count;  // Geometry::param_count
  bool in_place;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // One line for the preamble: the transport, its mode, the library version.
  virtual std::string describe() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Empty when the backend can run this case; else why not (printed in place of the row's numbers).
  virtual std::string unsupported(Collective c, DataType t, ReduceKind op, bool in_place) const = 0;

  // The send and receive buffers this backend registered for itself (fsdp-bench -R), each at least as
  // large as the run's; null: it uses the run's buffers.
  struct BufferPair {
    std::byte* send = nullptr;
    std::byte* recv = nullptr;
  };
  virtual BufferPair registered_buffers() const { return {}; }

  // Prepares for repeated calls with these arguments (Gloo builds its algorithm objects here).
  virtual void setup(const CallArgs& /*args*/) {}
  // Starts one call. Backends with asynchronous calls return at once; blocking ones run it.
  virtual void start(const CallArgs& args) = 0;
  // Waits for every call started since the last wait.
  virtual void wait_all() = 0;
  // Where this rank's result is after the call (in-place reduce-scatter of Open MPI and Gloo leaves
  // it elsewhere than nccl-tests' layout).
  virtual const std::byte* result(const CallArgs& args, size_t block_bytes) const;

  // Control traffic of the runner, over the backend itself: line up before timing, and combine the
  // per-rank numbers (times, wrong counts) of a row.
  virtual void barrier() = 0;
  enum class Combine { kSum, kMin, kMax };
  virtual void combine(double* values, int count, Combine how) = 0;
};

}  // namespace fsdp::bench
