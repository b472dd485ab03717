// What the reference Llama's layers take from the model's description (spec::ModelDims, one type for
// the planner and the model) and how a unit hands its parameters over.
#pragma once

#include <cstdint>
#include <span>

#include "spec/model_spec.h"

namespace fsdp::model {

// A unit's parameters as the runtime hands them over: one pointer per parameter, in the order of
// spec::make_llama (views into the unit's all-gathered flat buffer).
using Weights = std::span<const float* const>;
// Same order; every backward ADDS into them (+=), so micro-batches accumulate.
using Grads = std::span<float* const>;

// Routed experts a rank holds when `expert_parallel` ranks split them (1: all of them).
inline int64_t local_experts(const spec::MoeSpec& moe, int64_t expert_parallel) {
  return moe.num_experts / expert_parallel;
}
// Parameters of a rank's MoE feed-forward in spec order: router gate, w1 w2 w3 of each local expert,
// shared w1 w2 w3.
inline size_t moe_param_count(const spec::MoeSpec& moe, int64_t expert_parallel) {
  return 1 + 3 * static_cast<size_t>(local_experts(moe, expert_parallel)) + (moe.num_shared_experts > 0 ? 3 : 0);
}

// Parameter counts per unit, in spec order (checked against the spans every call).
inline constexpr size_t kEmbeddingParams = 1;  // tok_embeddings.weight
inline constexpr size_t kBlockParams = 9;      // wq wk wv wo w1 w2 w3 attention_norm ffn_norm
// A MoE block: wq wk wv wo, the MoE feed-forward's moe_param_count(), attention_norm ffn_norm.
inline size_t block_param_count(const spec::ModelDims& d, int64_t expert_parallel = 1) {
  return d.moe.enabled() ? 6 + moe_param_count(d.moe, expert_parallel) : kBlockParams;
}
inline constexpr size_t kOutputParams = 2;  // norm.weight output.weight
// Where a MoE block's routed experts start: after wq wk wv wo and the router gate.
inline constexpr size_t kBlockExpertsAt = 5;

}  // namespace fsdp::model
