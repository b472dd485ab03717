// The collectives FsdpModel issues and finishes over a few steps of its lifecycle with no compute in
// between: the C++ front end's schedule as a list, which fully_shard's is checked against (through
// _C.fsdp_model_trace, tests/python/test_fully_shard_schedule.py) and tests/runtime pin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "spec/policy.h"

namespace fsdp::runtime {

struct LifecycleEvent {
  int step = 0;      // from 1
  char phase = 'f';  // 'f' forward, 'b' backward (finalize_backward included)
  std::string what;  // "all_gather", "reduce_scatter" (issued); "all_gather_done", "reduce_scatter_done"
  int unit = 0;
  bool operator==(const LifecycleEvent&) const = default;
};

// Collective over `world`: FsdpModel over `units` units of one small float32 parameter each, under
// `policy` (its dtypes, reshard, prefetch), `steps` steps of pre/post forward 0..n-1, pre/post backward
// n-1..0 and finalize_backward, gradient sync on.
std::vector<LifecycleEvent> trace_lifecycle(Communicator& world, int units, const spec::Policy& policy, int steps);

}  // namespace fsdp::runtime
