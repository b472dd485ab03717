// The runtime's order of one training step, written out as the program its training thread runs:
// compute spans, collectives issued (they run on the progress engine meanwhile) and waited for, and the
// bytes live after every allocation or free. It follows runtime/fsdp_model.cc and train/trainer.cc:
//
//   previous step's optimizer: update unit u, then prefetch_next_step(u) issues its all-gather (u <= prefetch)
//   per micro-step, units 0..n-1:  pre_forward (issue u and the next `prefetch`, wait u), forward,
//                                  post_forward (reshard per reshard_after_forward)
//                  units n-1..0:   pre_backward (issue u unless unsharded, prefetch the previous `prefetch`,
//                                  wait u), backward, post_backward (last micro-step only: wait the pending
//                                  reduce-scatter and its HSDP all-reduce, issue this one's)
//   finalize_backward (wait the last), the loss and gradient-norm all-reduces, the optimizer.
//
// sharding/schedule_sim.h runs the program in time. Memory follows simulate_memory (cost_model.h) event
// for event, so the program's peak is the planner's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sharding/cost_model.h"
#include "spec/policy.h"

namespace fsdp::sharding {

// What a span is, named as fsdp-train's trace names it ("forward <unit>", "all_gather <unit>", ...).
enum class SpanKind : uint8_t {
  kForward,
  kBackward,
  kOptimizer,
  kAllGather,          // forward's, or backward's over the whole shard group
  kAllGatherBackward,  // backward's inside the reshard_after_forward = k group
  kReduceScatter,
  kAllReduce,      // HSDP, across replicas
  kAllToAll,       // expert parallelism's token exchange, blocking
  kStepSync,       // the loss and gradient-norm all-reduces over the world, blocking
  kMxfp8Codec,     // MXFP8 quantise / decode on the training thread (compute)
  kBuddyExchange,  // buddy redundancy: the grad shards sent to the mirror holder, the buddy's received (reduce stream)
  kMirrorUpdate,   // buddy redundancy: the optimizer update of the mirror (compute)
};
std::string_view name(SpanKind k);
bool is_communication(SpanKind k);

// One collective as the simulator prices it: `seconds` alone on its link at full rate. Collectives of
// one stream (one communicator) run in issue order; those on one link share its bandwidth.
struct SimCollective {
  double seconds = 0;  // 0: none (a group of one); latency_seconds included
  int link = 0;        // static_cast<int>(spec::LinkLevel)
  int stream = 0;      // one of the kStream* below
  int64_t bytes = 0;   // what it moves, for the trace
  // Of `seconds`, the per-step latencies ((n - 1) alpha of a ring): on a CPU mostly the progress engine
  // waiting for a time slice, which neither shares the link's bandwidth nor takes the cores from
  // compute. A call the training thread waits for skips what is left of it: the waiting thread drives
  // the collective itself (caller-driven progress, collectives/core/progress_engine.h). The rest of
  // `seconds` is the bytes' transfer.
  double latency_seconds = 0;
};
inline constexpr int kStreamGather = 0;       // shard group all-gathers (forward; backward without a kept slice)
inline constexpr int kStreamGatherGroup = 1;  // reshard_after_forward = k: backward all-gathers in the group of k
inline constexpr int kStreamReduce = 2;       // reduce-scatters
inline constexpr int kStreamExpert = 3;       // + the above for expert units (their own communicators)
inline constexpr int kNumStreams = 6;
inline constexpr int kNumLinks = 2;

struct SimUnit {
  double forward = 0;    // compute seconds alone, one micro-step
  double backward = 0;   // including recomputation
  double optimizer = 0;  // its shard's update
  SimCollective all_gather, all_gather_backward, reduce_scatter, all_reduce;
  SimCollective all_to_all_forward, all_to_all_backward;  // blocking, on the training thread
  // MXFP8 codec seconds on the training thread, where runtime/fsdp_unit.cc spends them (0 without MXFP8):
  double gather_quantize = 0;  // the owner quantises its shard at the first gather after the optimizer
  double gather_decode = 0;    // every shard-group gather decodes all slots in wait_unshard's copy-out
  double kept_decode = 0;      // reshard_after_forward = k: the kept slice decoded again from the slots
  double reduce_quantize = 0;  // start_reduce_grads: the chunks sent to the other ranks
  double reduce_decode = 0;    // finish_reduce_grads: the received chunks decoded and added in f32
  UnitMemory memory;
};

struct StepSpec {
  std::vector<SimUnit> units;
  spec::Policy policy;  // prefetch, reshard, grad_accum and the dtypes memory is counted in
  int64_t shard_degree = 1;
  bool fp32_compute = false;
  int64_t base_bytes = 0;   // always live (model states, the residual stream)
  SimCollective step_sync;  // the loss and the gradient-norm all-reduces, each
  // Buddy redundancy (spec::Redundancy::kBuddy, runtime/buddy_mirror.h): after the gradient norm the
  // rank's grad shards go to its mirror holder and its buddy's arrive (buddy_exchange, blocking); they
  // stay live (buddy_grad_bytes; twice that during the exchange, which sends a packed copy of the
  // rank's own) through the optimizer, whose prefetches overlap them, until the mirror's
  // update (mirror_update seconds) frees them. All zero without it (the mirror itself is in base_bytes).
  SimCollective buddy_exchange;
  int64_t buddy_grad_bytes = 0;
  double mirror_update = 0;
};

enum class Op : uint8_t {
  kCompute,   // the training thread computes for `seconds`
  kIssue,     // starts collective `call` (queued behind its stream)
  kWait,      // blocks until `call` finished
  kBlocking,  // issue + wait of a collective run on the training thread (HSDP all-reduce, all-to-all)
  kMemory,    // `bytes` live from here on
};

struct Instruction {
  Op op = Op::kCompute;
  SpanKind kind = SpanKind::kForward;
  int unit = -1;
  int call = -1;  // index into Program::calls
  double seconds = 0;
  int64_t bytes = 0;
};

struct CollectiveCall {
  SimCollective collective;
  SpanKind kind = SpanKind::kAllGather;
  int unit = -1;
};

// A run of instructions that the step contains `repeat` times (identical micro-steps without gradient
// sync are simulated once); its first and last instruction leave no collective in flight when repeat > 1.
struct Segment {
  size_t begin = 0, end = 0;  // instruction range
  int64_t repeat = 1;         // 0: warm-up, run but not counted (the previous step's optimizer)
};

struct Program {
  std::vector<Instruction> instructions;
  std::vector<CollectiveCall> calls;
  std::vector<Segment> segments;  // cover the instructions, in order
  MemoryTimeline memory;          // peak (base included) and each category's maximum
};

// The step of `spec`, in steady state (it opens with the previous step's optimizer prefetching).
Program step_program(const StepSpec& spec);

// Seconds of one optimizer step the training thread computes spans of `kind`, alone (repeats counted,
// the warm-up not): e.g. the MXFP8 codec's.
double compute_seconds(const Program& program, SpanKind kind);

}  // namespace fsdp::sharding
