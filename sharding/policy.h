// Training policy the plan is made for: mixed precision, optimizer, FSDP2 reshard and prefetch, activation
// checkpointing, batch shape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "collectives/types/dtype.h"

namespace fsdp::sharding {

enum class Optimizer { kAdamW, kSgdMomentum };
std::string_view name(Optimizer o);
Optimizer parse_optimizer(std::string_view s);  // "adamw", "sgd" (with momentum)
// fp32 state per parameter element: AdamW exp_avg + exp_avg_sq = 8, SGD momentum buffer = 4.
int64_t optimizer_state_bytes_per_element(Optimizer o);

enum class ActivationCheckpointing { kNone, kSelective, kFull };
std::string_view name(ActivationCheckpointing ac);
ActivationCheckpointing parse_activation_checkpointing(std::string_view s);  // none, selective, full

// FSDP2 reshard_after_forward: true frees the full params after forward (all-gather again in backward);
// false keeps them to backward; an integer k keeps a 1/k slice sharded over a secondary group of k
// consecutive ranks (ZeRO++ hpZ) so backward all-gathers inside that group only.
struct Reshard {
  enum class Mode { kFull, kNone, kGroup };
  Mode mode = Mode::kFull;
  int64_t group = 0;  // kGroup only

  static Reshard parse(std::string_view s);  // "true", "false" or a positive integer
  std::string to_string() const;
  // Size of the group the backward all-gather runs over (1 for kNone: nothing to gather).
  int64_t backward_group(int64_t shard_degree) const;
  bool operator==(const Reshard&) const = default;
};

struct Policy {
  DataType param_dtype = DataType::kBfloat16;  // all-gather and compute dtype
  DataType reduce_dtype = DataType::kFloat32;  // reduce-scatter (and HSDP all-reduce) dtype
  Optimizer optimizer = Optimizer::kAdamW;
  Reshard reshard;
  int64_t prefetch = 1;  // units all-gathered ahead of the one computing
  ActivationCheckpointing ac = ActivationCheckpointing::kNone;
  int64_t micro_batch = 1;  // sequences per rank per micro-step
  int64_t seq_len = 8192;
  int64_t grad_accum = 1;  // micro-steps per optimizer step
};

inline constexpr int64_t kMaxPrefetch = 8;

// Throws PlanError for non-floating dtypes, negative prefetch, non-positive batch or sequence sizes,
// and a reshard group that does not divide the shard degree.
void validate(const Policy& policy, int64_t shard_degree);

}  // namespace fsdp::sharding
