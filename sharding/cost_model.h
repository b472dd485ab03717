// The planner's cost model as small pure functions: bytes per rank, alpha-beta collective time,
// roofline compute time, and the overlap a prefetch depth allows. Formulas and their reasoning are in
// docs/planner.md; every byte count here is one the runtime will allocate, so measured peak memory can
// be checked against it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "sharding/model_spec.h"
#include "sharding/policy.h"
#include "sharding/shard_layout.h"

namespace fsdp::sharding {

// ---- Memory (bytes per rank) ----
//
// Every term is a buffer the runtime (runtime/fsdp_unit.h) allocates, and the peak comes from replaying
// the runtime's allocation order over one step (simulate_memory), so a measured peak can be held to it.

// Bytes per element of what the model computes on: the unsharded parameters and gradients (copy-out of
// the all-gather) and the activations. The param dtype on chips with low-precision matmuls (activations
// at least 2 bytes: fp8 matmuls keep bf16 activations); 4 where the chip computes in fp32.
int64_t compute_element_bytes(DataType param_dtype, bool fp32_compute);
int64_t activation_element_bytes(DataType param_dtype, bool fp32_compute);

// Sharded (master) parameters in each parameter's storage dtype, padding included.
int64_t param_shard_bytes(const ModelSpec& model, const std::vector<UnitShardLayout>& units);
// Gradient shards: the same size as the parameter shards (reduced gradients accumulate in the
// parameters' dtype).
int64_t grad_shard_bytes(const ModelSpec& model, const std::vector<UnitShardLayout>& units);
// fp32 optimizer state over the rank's padded shard elements.
int64_t optimizer_state_bytes(int64_t shard_numel, Optimizer optimizer);

// Elements saved per token by one transformer block for backward (flash attention: no score matrix), in
// the activation dtype, under the block's own mode (block_ac: kSelective is the op-level policy here):
//   none:      6*dim + 2*kv_dim + 4*ffn            (block input, norm outputs, q/k/v, attention output,
//                                                  residual, w1/w3 outputs, silu output, their product;
//                                                  ffn = ffn_hidden, or for MoE the expert width times
//                                                  (experts per token + shared experts))
//              + for MoE: experts + 2k + 2k*dim + 3k   (scores, routing weights and their gradients,
//                                                  expert-major copies of input and output, indices)
//   selective: 3*dim + kv_dim + ffn                (TorchTitan's op policy: input, q, v, attention output,
//                                                  w1 output; k, h, w3 output, norms, silu and product are
//                                                  recomputed; a MoE block keeps its MoE saves: 4*ffn + routing)
//   full:      dim                                 (the block input only)
int64_t layer_saved_elements_per_token(const ModelDims& dims, ActivationCheckpointing ac);
// fp32 statistics saved per token: none 2 + n_heads (both norms' inverse RMS, one softmax log-sum-exp
// per head), selective n_heads (the norms are recomputed), full 0.
int64_t layer_saved_stats_per_token(const ModelDims& dims, ActivationCheckpointing ac);

// What the runtime holds for one unit.
struct UnitMemory {
  int64_t flat_numel = 0;        // all-gather / reduce-scatter buffer elements (padded)
  int64_t numel = 0;             // unsharded parameter / gradient elements
  int64_t activations = 0;       // bytes its forward saves until its backward
  int64_t forward_scratch = 0;   // transient bytes during its forward (what checkpointing drops at its end)
  int64_t backward_scratch = 0;  // transient bytes during its backward (recomputation, gradient temporaries)
};

// Per unit: blocks (is_layer) save layer_saved_elements_per_token; the output head (the last unit, when
// it is not a block) saves its input, the normed input, their inverse RMS, the targets and the logits
// with their fp32 softmax (one buffer when computing in fp32); the embedding saves nothing. Block l runs
// block_ac(policy, l); its backward holds its gradient temporaries (d norm output, d attention output, dq,
// dk, dv) plus, with checkpointing, the recomputed tensors, which its forward also holds until it ends.
// All zero when the model's dims are unknown.
std::vector<UnitMemory> unit_memory(const ModelSpec& model, const std::vector<UnitShardLayout>& units,
                                    const Policy& policy, bool fp32_compute);

struct MemoryTimeline {
  int64_t peak = 0;  // the most bytes live at any moment (base included)
  // Each category's own maximum over the step (they need not coincide).
  int64_t all_gather = 0;        // all-gather outputs in param dtype, in flight or being copied out
  int64_t unsharded_params = 0;  // copied-out parameters in compute dtype
  int64_t kept_params = 0;       // reshard_after_forward = k slices (or every unit's parameters when false)
  int64_t unsharded_grads = 0;   // full gradients in compute dtype
  int64_t reduce_scatter = 0;    // reduce-scatter buffers in reduce dtype (one in flight)
  int64_t activations = 0;
};

// Replays the runtime's allocations over one optimizer step of grad_accum micro-batches: per unit in
// forward, the all-gathers it and the next `prefetch` units issue, the copy-out, the saved activations,
// the reshard; in backward the same in reverse plus the unsharded gradients and the reduce-scatter
// buffer (the previous unit's is freed before the next starts; none while gradient sync is off
// between micro-batches). `base` is what is always live (model states, the residual stream).
MemoryTimeline simulate_memory(const std::vector<UnitMemory>& units, int64_t base, const Policy& policy,
                               int64_t shard_degree, bool fp32_compute);

// ---- FLOPs ----

// Matmul FLOPs per token of one training step (forward + backward = 3 x forward): 6 per active
// parameter, plus causal-agnostic attention 12 * dim * seq_len for a transformer block.
double unit_flops_per_token(const UnitSpec& unit, const ModelDims& dims, int64_t seq_len);
double model_flops_per_token(const ModelSpec& model, int64_t seq_len);
// Extra FLOPs per token that checkpointing recomputes: full repeats a block's forward (a third of the
// above); selective (the op policy) recomputes the wk, wo and, in a dense block, w3 matmuls:
// 2 * dim * (kv_dim + q_dim + ffn_hidden); its elementwise recomputation is priced as memory traffic.
double unit_recompute_flops_per_token(const UnitSpec& unit, const ModelDims& dims, int64_t seq_len,
                                      ActivationCheckpointing ac);

// ---- Time ----

struct Link {
  double bytes_per_s = 1;
  double latency_s = 0;
};

// Ring algorithms over n ranks moving a full buffer of `bytes` (all-gather output / reduce-scatter input):
// (n - 1) steps of alpha plus (n - 1) / n of the buffer through each rank's link. 0 for n = 1.
double all_gather_seconds(double bytes, int64_t n, const Link& link);
double reduce_scatter_seconds(double bytes, int64_t n, const Link& link);
double all_reduce_seconds(double bytes, int64_t n, const Link& link);  // reduce-scatter + all-gather
// Bytes each rank sends for those collectives.
double ring_bytes_sent(double bytes, int64_t n);

// Roofline: bound by peak FLOP/s or by device memory traffic, whichever is slower.
double roofline_seconds(double flops, double peak_flops, double bytes_moved, double memory_bytes_per_s);

// One unit's times for one micro-step (seconds).
struct UnitTimes {
  double forward = 0;
  double backward = 0;  // including recomputation
  double all_gather_forward = 0;
  double all_gather_backward = 0;
  double reduce_scatter = 0;
  double all_reduce = 0;  // HSDP, over the replicate group
};

struct MicroStepTimes {
  double total = 0;    // wall time of forward + backward
  double compute = 0;  // sum of compute
};

// Two-stream schedule of one micro-step, FSDP2 style: units forward in order, backward in reverse.
// All-gathers run on one stream, reduce-scatters and all-reduces on another, compute on a third. The
// all-gather for a unit may start once the buffer it reuses is free: with prefetch depth d it waits for
// the compute of the unit d + 1 places earlier; d = 0 serialises all-gather and compute. Reduce-scatter
// of a unit starts when its backward ends; the step ends when the last collective ends.
MicroStepTimes simulate_micro_step(const std::vector<UnitTimes>& units, int64_t prefetch);

}  // namespace fsdp::sharding
