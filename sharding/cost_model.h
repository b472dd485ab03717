// The planner's cost model as small pure functions: bytes per rank, alpha-beta collective time,
// roofline compute time, and the overlap a prefetch depth allows. Formulas and their reasoning are in
// docs/planner.md; every byte count here is one the runtime will allocate, so measured peak memory can
// be checked against it.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/types/dtype.h"
#include "sharding/model_spec.h"
#include "sharding/policy.h"
#include "sharding/shard_layout.h"

namespace fsdp::sharding {

// ---- Memory (bytes per rank) ----

// Sharded (master) parameters in each parameter's storage dtype, padding included.
int64_t param_shard_bytes(const ModelSpec& model, const std::vector<UnitShardLayout>& units);
// Gradient shards: FSDP2 casts the reduce-scatter output back to the parameter's storage dtype, so the
// same size as the parameter shards.
int64_t grad_shard_bytes(const ModelSpec& model, const std::vector<UnitShardLayout>& units);
// fp32 optimizer state over the rank's padded shard elements.
int64_t optimizer_state_bytes(int64_t shard_numel, Optimizer optimizer);
// The units in flight: the one computing plus `prefetch` ahead, each a full flat buffer in param dtype
// (the rank's all-gather input is a slice of the output, as in FSDP2, so it costs nothing extra).
int64_t all_gather_buffer_bytes(int64_t largest_flat_numel, DataType param_dtype, int64_t prefetch);
// One unit's full-gradient reduce-scatter input plus its chunk-sized output, in reduce dtype.
int64_t reduce_scatter_buffer_bytes(int64_t largest_flat_numel, int64_t largest_chunk_numel, DataType reduce_dtype);
// The full gradients backward produces (param dtype) before they are copied into the reduce-scatter input.
int64_t unsharded_grad_bytes(int64_t largest_flat_numel, DataType param_dtype);
// Parameters held from forward to backward: false keeps every unit's full buffer, an integer k keeps
// 1/k of each, true keeps nothing.
int64_t kept_param_bytes(const Reshard& reshard, int64_t total_flat_numel, DataType param_dtype);

// Activations use the compute dtype, at least 2 bytes (fp8 matmuls still keep bf16 activations).
int64_t activation_element_bytes(DataType param_dtype);
// Elements saved per token by one transformer block for backward (flash attention: no score matrix):
//   none:      6*dim + 2*kv_dim + 4*ffn_hidden*k   (norm inputs and outputs, q/k/v, attention output,
//                                                  w1/w3 outputs, silu output, their product; k experts
//                                                  per token for MoE, else 1)
//   selective: 4*dim + 2*kv_dim + 2*ffn_hidden*k   (norm outputs and silu/product recomputed)
//   full:      dim                                 (the block input only)
int64_t layer_saved_elements_per_token(const ModelDims& dims, ActivationCheckpointing ac);
// Peak activation bytes per rank for one micro-batch: every block's saved tensors, plus one block's
// recomputed tensors during its backward when checkpointing, plus the embedding output and the logits
// (param-dtype logits and their fp32 softmax for the loss). 0 when the model's dims are unknown.
int64_t activation_bytes(const ModelDims& dims, int64_t seq_len, int64_t micro_batch, ActivationCheckpointing ac,
                         DataType param_dtype);

// ---- FLOPs ----

// Matmul FLOPs per token of one training step (forward + backward = 3 x forward): 6 per active
// parameter, plus causal-agnostic attention 12 * dim * seq_len for a transformer block.
double unit_flops_per_token(const UnitSpec& unit, const ModelDims& dims, int64_t seq_len);
double model_flops_per_token(const ModelSpec& model, int64_t seq_len);
// Extra FLOPs per token that checkpointing recomputes: full repeats a block's forward (a third of the
// above); selective recomputes elementwise ops only (no matmul FLOPs, priced as memory traffic).
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
