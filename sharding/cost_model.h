// The planner's cost model as small pure functions: bytes per rank, alpha-beta collective time,
// roofline compute time, and the overlap a prefetch depth allows. Formulas and their reasoning are in
// docs/planner.md; every byte count here is one the runtime will allocate, so measured peak memory can
// be checked against it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "spec/model_spec.h"
#include "spec/policy.h"
#include "spec/shard_layout.h"

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
int64_t param_shard_bytes(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units);
// Gradient shards: the same size as the parameter shards (reduced gradients accumulate in the
// parameters' dtype).
int64_t grad_shard_bytes(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units);
// fp32 optimizer state over the rank's padded shard elements.
int64_t optimizer_state_bytes(int64_t shard_numel, spec::Optimizer optimizer);

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
//   + under expert parallelism (ep > 1, none and selective): expert_parallel_saved_elements_per_token.
int64_t layer_saved_elements_per_token(const spec::ModelDims& dims, spec::ActivationCheckpointing ac,
                                       int64_t expert_parallel = 1);
// What a MoE block keeps in addition under expert parallelism (model/moe_feed_forward.cc's ep_saved_):
// per row its experts received, the row as it arrived and its expert-major input and output (3 * dim),
// plus the experts' SwiGLU saves (4 * expert width) that it then keeps for the rows received instead of
// the rows sent. Balanced routing has a rank receive as many rows as it sends, k per token, so the
// difference is k * 3 * dim per token; 0 for ep = 1 or a dense model.
int64_t expert_parallel_saved_elements_per_token(const spec::ModelDims& dims, int64_t expert_parallel);
// fp32 statistics saved per token: none 2 + n_heads (both norms' inverse RMS, one softmax log-sum-exp
// per head), selective n_heads (the norms are recomputed), full 0.
int64_t layer_saved_stats_per_token(const spec::ModelDims& dims, spec::ActivationCheckpointing ac);

// What the runtime holds for one unit.
struct UnitMemory {
  int64_t flat_numel = 0;        // all-gather / reduce-scatter buffer elements (padded)
  int64_t chunk_numel = 0;       // one rank's shard of it
  int64_t numel = 0;             // unsharded parameter / gradient elements
  int64_t activations = 0;       // bytes its forward saves until its backward
  int64_t forward_scratch = 0;   // transient bytes during its forward (what checkpointing drops at its end)
  int64_t backward_scratch = 0;  // transient bytes during its backward (recomputation, gradient temporaries)
  // Whether reshard_after_forward = k keeps a 1/k slice of it for backward. The expert units' groups
  // have no such subgroup (runtime/process_groups.h): they reshard fully and gather again in backward.
  bool keeps_group_slice = true;
  // Whether its all-gather runs over shared-memory windows (a gather group of 2+ ranks on one server):
  // where its parameters are computed on in the param dtype it then lands in them, with no rank-major
  // buffer (runtime/fsdp_unit.h).
  bool gathers_in_windows = true;
};

// Per unit: blocks (is_layer) save layer_saved_elements_per_token; the output head (the last unit, when
// it is not a block) saves its input, the normed input, their inverse RMS, the targets and the logits
// with their fp32 softmax (one buffer when computing in fp32); the embedding saves nothing. Block l runs
// block_ac(policy, l); its backward holds its gradient temporaries (d norm output, d attention output, dq,
// dk, dv) plus, with checkpointing, the recomputed tensors, which its forward also holds until it ends.
// All zero when the model's dims are unknown.
// `model` is the units one rank holds (expert_parallel_units under expert parallelism of degree
// expert_parallel, whose expert units hold no activations of their own: the block's unit does).
std::vector<UnitMemory> unit_memory(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units,
                                    const spec::Policy& policy, bool fp32_compute, int64_t expert_parallel = 1);

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
// between micro-batches). `base` is what is always live (model states, the residual stream). The
// replay is the step program's (sharding/step_program.h), which the schedule simulator also times.
// buddy_grad_bytes: the buddy's received grad shards under buddy redundancy, live from the exchange after
// the gradient norm to the mirror's update after the optimizer (StepSpec::buddy_grad_bytes).
MemoryTimeline simulate_memory(const std::vector<UnitMemory>& units, int64_t base, const spec::Policy& policy,
                               int64_t shard_degree, bool fp32_compute, int64_t buddy_grad_bytes = 0);

// ---- FLOPs ----

// Matmul FLOPs per token of one training step (forward + backward = 3 x forward): 6 per active
// parameter, plus causal-agnostic attention 12 * dim * seq_len for a transformer block. A unit of a
// rank's local experts under expert parallelism (UnitSpec::experts, L experts) computes the k rows per
// token its EP group routes to it (balanced routing): its experts are active at k / L, not k / E.
double unit_flops_per_token(const spec::UnitSpec& unit, const spec::ModelDims& dims, int64_t seq_len);
double model_flops_per_token(const spec::ModelSpec& model, int64_t seq_len);
// The matmul FLOPs per token one micro-step executes for a unit (what its time is priced on; MFU keeps
// the model FLOPs above): 2 forward and 4 backward per element of each weight matrix (1-D weights such
// as norms do no matmul), an expert's at its active fraction; a block adds attention's score and value
// products. The CPU reference (model/attention.cc, no fused kernel) computes them over the whole T x T
// matrix: forward QK^T and PV, 4 T q_dim; backward QK^T again, dV, dP, dQ, dK, 10 T q_dim. A fused
// causal kernel (FlashAttention, fused_causal = true) skips the masked half: 2 T q_dim and 5 T q_dim.
struct ExecutedFlops {
  double forward = 0;
  double backward = 0;
  double attention_forward = 0;  // of which attention's own products (QK^T, PV; a chip prices them apart)
  double attention_backward = 0;
};
ExecutedFlops unit_executed_flops_per_token(const spec::UnitSpec& unit, const spec::ModelDims& dims, int64_t seq_len,
                                            bool fused_causal);

// Bytes per token the non-matmul passes of one micro-step move for a unit (read + written, elements of
// `element_bytes`), priced at memory bandwidth on top of the matmuls (they run as passes of their own):
//   block forward:  two RMSNorms 4 dim, RoPE on q and k 2 (q_dim + kv_dim), SwiGLU's elementwise part
//                   4 ffn, the two residual adds 6 dim, and without a fused attention kernel the softmax
//                   over each head's scores 5 n_heads T (exp pass, sum, scale);
//   block backward: norms 6 dim, RoPE 2 (q_dim + kv_dim), SwiGLU 6 ffn, residuals 2 dim, and unfused the
//                   recomputed softmax 5 n_heads T plus its gradient 3 n_heads T;
//   output head:    norm 2 dim and the softmax / cross-entropy over the vocabulary 3 vocab; backward 3 dim
//                   and 2 vocab;
//   embedding:      the row gathered 2 dim; backward the row added 2 dim.
// ffn is the dense width, or for MoE the active experts' (experts_per_token + shared) x expert width.
ExecutedFlops unit_elementwise_bytes_per_token(const spec::UnitSpec& unit, const spec::ModelDims& dims, int64_t seq_len,
                                               int64_t element_bytes, bool fused_causal, bool is_head);

// Extra FLOPs per token that checkpointing recomputes: full repeats a block's forward (a third of the
// above); selective (the op policy) recomputes the wk, wo and, in a dense block, w3 matmuls:
// 2 * dim * (kv_dim + q_dim + ffn_hidden); its elementwise recomputation is priced as memory traffic.
double unit_recompute_flops_per_token(const spec::UnitSpec& unit, const spec::ModelDims& dims, int64_t seq_len,
                                      spec::ActivationCheckpointing ac);

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

// The link a group of n ranks spread evenly over `nodes` servers (L = n / nodes on each) sees, as the
// one Link the ring formulas above take. On one server: `intra`. Across servers the collective is
// hierarchical over rails, as the runtime's (collectives/algorithms/*_hierarchical.cc) and NCCL's
// rings over rail-connected NICs are: each rank's own network link carries (nodes - 1) / nodes of the
// buffer / L, its server's links (L - 1) / L of it, one phase after the other:
//   time = (L - 1) / L * B / intra + (nodes - 1) / (nodes * L) * B / inter
//          + 2 (L - 1) alpha_intra + (nodes - 1) alpha_inter,
// returned as the bandwidth and per-step latency with which (n - 1) / n * B and (n - 1) steps give it.
// With one rank per server (an HSDP replicate group) that is the flat ring over `inter`.
Link group_link(int64_t n, int64_t nodes, const Link& intra, const Link& inter);

// ---- Expert parallelism's all-to-all ----
//
// A MoE block's token exchange over the EP group of n ranks: every rank sends `bytes` in all (the rows
// it routes, k per token, dim wide, in the activation dtype), bytes / n to each rank, itself included
// (balanced routing), so bytes * (n - 1) / n leave it. The runtime exchanges pairwise, one round per
// peer: rounds to the `local` - 1 peers on its server use the intra link, the n - local others the
// inter link; the rounds run one after another.
struct AllToAllCost {
  double intra_bytes = 0;  // sent per rank over each link
  double inter_bytes = 0;
  double intra_seconds = 0;
  double inter_seconds = 0;
  double seconds() const { return intra_seconds + inter_seconds; }
};
AllToAllCost all_to_all_cost(double bytes, int64_t n, int64_t local, const Link& intra, const Link& inter);
// Bytes one MoE block's each all-to-all carries per rank: tokens * k * dim * activation bytes.
double moe_all_to_all_bytes(const spec::ModelDims& dims, int64_t tokens, int64_t activation_bytes);
// All-to-alls of one MoE block per micro-step: dispatch and combine in forward, their gradients in
// backward (4), and with full checkpointing the forward's two again when backward recomputes it (6).
int64_t moe_all_to_alls(spec::ActivationCheckpointing ac);

// Roofline: bound by peak FLOP/s or by device memory traffic, whichever is slower.
double roofline_seconds(double flops, double peak_flops, double bytes_moved, double memory_bytes_per_s);

}  // namespace fsdp::sharding
