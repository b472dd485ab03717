// Training policy the plan is made for: mixed precision, optimizer, FSDP2 reshard and prefetch, activation
// checkpointing, batch shape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/dtype.h"
#include "spec/fault_tolerance.h"

namespace fsdp::spec {

enum class Optimizer { kAdamW, kSgdMomentum };
std::string_view name(Optimizer o);
Optimizer parse_optimizer(std::string_view s);  // "adamw", "sgd" (with momentum)
// fp32 state per parameter element: AdamW exp_avg + exp_avg_sq = 8, SGD momentum buffer = 4.
int64_t optimizer_state_bytes_per_element(Optimizer o);

// TorchTitan's activation_checkpoint.mode. What one block does under each (model/transformer_block.h):
//   none:      saves everything its backward reads;
//   selective: with ac_every = 0 (selective_ac_option = "op") TorchTitan's op policy: keeps the matmul
//              and attention outputs except every second matmul's, recomputes those and the elementwise
//              ops in backward; with ac_every = k > 0 every k-th block is full and the others none
//              (block_ac);
//   full:      saves its input only and reruns its forward inside its backward.
enum class ActivationCheckpointing { kNone, kSelective, kFull };
std::string_view name(ActivationCheckpointing ac);
ActivationCheckpointing parse_activation_checkpointing(std::string_view s);  // none, selective, full

// FSDP2's reshard_after_forward, by TorchTitan's policy names (fsdp_reshard_after_forward):
//   default (FSDP2's true): every unit but the last frees its full parameters after forward and
//     all-gathers them again in backward; the last unit, whose backward runs right after its forward,
//     keeps them (TorchTitan's default, and what FSDP2 does for the root);
//   always: every unit frees them, the last one too (one more all-gather per step, a lower peak);
//   never (FSDP2's false): every unit keeps them until its backward;
//   an integer k: after forward keep a 1/k slice sharded over a secondary group of k consecutive ranks
//     (ZeRO++ hpZ), so backward all-gathers inside that group only (the last unit keeps everything).
struct Reshard {
  enum class Mode { kDefault, kAlways, kNever, kGroup };
  Mode mode = Mode::kDefault;
  int64_t group = 0;  // kGroup only

  // "default" (or "true"), "always", "never" (or "false"), or a positive integer.
  static Reshard parse(std::string_view s);
  std::string to_string() const;  // "default", "always", "never" or the group size
  // Whether unit `unit` of `num_units` (forward order) gives up its full parameters after forward
  // (to a kept 1/k slice for kGroup).
  bool reshards(int64_t unit, int64_t num_units) const;
  // Size of the group the backward all-gather runs over (1 for kNone: nothing to gather).
  int64_t backward_group(int64_t shard_degree) const;
  bool operator==(const Reshard&) const = default;
};

// The precision a collective carries, apart from the compute dtype. kDefault sends param_dtype (all-gather)
// or reduce_dtype (reduce-scatter) as it is; kMxfp8 sends MXFP8 E4M3 (collectives/kernels/mxfp8.h), 8.25 bits
// per element, decoded on arrival (gradients are summed in f32, never in 8 bits).
enum class CommPrecision { kDefault, kMxfp8 };
std::string_view name(CommPrecision p);                  // "default", "mxfp8"
CommPrecision parse_comm_precision(std::string_view s);  // throws SpecError naming the choices
// Bytes per element on the wire for `type` data sent at precision p: element_size(type), or 33/32 for MXFP8
// (one byte per element and one scale byte per block of 32).
double wire_element_bytes(CommPrecision p, DataType type);

// How the loss over the vocabulary is computed, for the output head's memory: kFused, the runtime's head
// (logits and their fp32 softmax, one buffer when the logits are fp32); kEager, PyTorch eager's
// F.cross_entropy(logits.float(), ...) as TorchTitan and the Python front end run it: the logits, their
// fp32 copy and the fp32 log-softmax it saves, and in backward that log-softmax's gradient twice.
enum class LossImpl { kFused, kEager };
std::string_view name(LossImpl l);        // "fused", "eager"
LossImpl parse_loss(std::string_view s);  // throws SpecError naming the choices

struct Policy {
  DataType param_dtype = DataType::kBfloat16;          // all-gather and compute dtype
  DataType reduce_dtype = DataType::kFloat32;          // reduce-scatter (and HSDP all-reduce) dtype
  CommPrecision param_comm = CommPrecision::kDefault;  // what the parameter all-gathers carry
  CommPrecision grad_comm = CommPrecision::kDefault;   // what the gradient reduce-scatters carry
  Optimizer optimizer = Optimizer::kAdamW;
  Reshard reshard;
  int64_t prefetch = 1;  // units all-gathered ahead of the one computing
  ActivationCheckpointing ac = ActivationCheckpointing::kNone;
  int64_t ac_every = 0;     // kSelective only: 0 = op-level policy, k > 0 = every k-th block fully checkpointed
  int64_t micro_batch = 1;  // sequences per rank per micro-step
  int64_t seq_len = 8192;
  int64_t grad_accum = 1;  // micro-steps per optimizer step
  LossImpl loss = LossImpl::kFused;
  // What keeps a lost rank's shard alive (spec/fault_tolerance.h): the planner prices it, the runtime keeps it.
  Redundancy redundancy = Redundancy::kNone;
};

inline constexpr int64_t kMaxPrefetch = 8;

// What transformer block `layer` (0-based) does under the policy: kNone, kSelective (the op-level policy)
// or kFull. Layer-interval selective follows TorchTitan's _apply_layer_sac, which counts blocks from 1 and
// wraps block number c when c % k == 0: blocks k-1, 2k-1, ... (0-based) are full, the rest none.
ActivationCheckpointing block_ac(const Policy& policy, int64_t layer);
// The policy's checkpointing as the plan file keeps it: "none", "full", "selective:op" or "selective:K".
std::string ac_to_string(const Policy& policy);
// Reads ac_to_string()'s forms into policy.ac / ac_every; plain "selective" means "selective:op".
// Throws SpecError naming the accepted forms.
void parse_ac(std::string_view s, Policy& policy);

// Throws SpecError for non-floating dtypes, negative prefetch, non-positive batch or sequence sizes,
// and a reshard group that does not divide the shard degree.
void validate(const Policy& policy, int64_t shard_degree);

}  // namespace fsdp::spec
