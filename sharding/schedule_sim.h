// Runs a step program (sharding/step_program.h) in time: the training thread computes, issues and waits
// in program order; collectives run on their streams (one communicator each, in issue order) while it
// computes. What they share is priced as processor sharing:
//   - collectives in flight on one link split its bandwidth evenly;
//   - on a chip whose collectives are driven by the same cores as its compute (a CPU: the progress
//     engine's copies and reductions), `contention` c in [0, 1] slows both while they overlap, each to a
//     rate of 1 / (1 + c); c = 0 (accelerators: DMA engines and links of their own) leaves both at full
//     rate, c = 1 time-slices one core between them;
//   - a collective's latency part (SimCollective::latency_seconds: waiting for peers) comes first and
//     shares neither: only its transfer takes link bandwidth and cores.
// The result is the step time, the time the training thread waited for communication, and the bytes live
// over time; with `record` every span, for a trace in fsdp-train's format (fsdp-plan --trace).
#pragma once

#include <cstdint>
#include <vector>

#include "sharding/step_program.h"

namespace fsdp::sharding {

struct SimOptions {
  double contention = 0;
  bool record = false;  // keep the spans and the memory timeline
};

struct SimSpan {
  SpanKind kind = SpanKind::kForward;
  int unit = -1;
  double start = 0;  // seconds since the step began (negative: the previous step's optimizer)
  double duration = 0;
  int64_t bytes = -1;  // collectives: what they move
};

struct MemoryPoint {
  double time = 0;
  int64_t bytes = 0;
};

struct StepSimulation {
  double step = 0;  // seconds of one optimizer step in steady state, repeated micro-steps included
  double compute = 0;  // the training thread computing (stretched by contention)
  double exposed_communication = 0;  // the training thread waiting for collectives or running blocking ones
  int64_t peak_bytes = 0;
  std::vector<SimSpan> spans;          // record only: each micro-step once, in start order per track
  std::vector<MemoryPoint> memory;     // record only: bytes live after every change
};

// Throws std::logic_error if the program waits for a collective it never issued (a deadlock).
StepSimulation simulate(const Program& program, const SimOptions& options);
inline StepSimulation simulate_step(const StepSpec& spec, const SimOptions& options) {
  return simulate(step_program(spec), options);
}

}  // namespace fsdp::sharding
