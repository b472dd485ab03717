// Transformer dimensions of the reference Llama model, and the checks the kernels rely on.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "model/ops.h"
#include "sharding/model_spec.h"

namespace fsdp::model {

struct LlamaDims {
  int64_t dim = 0;
  int64_t layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.f;
  std::optional<ops::RopeScaling> rope_scaling;  // Llama 3.1 scaling of the RoPE frequencies; unset: none

  int64_t head_dim() const { return dim / n_heads; }
  int64_t q_dim() const { return n_heads * head_dim(); }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }

  // Throws std::invalid_argument for MoE specs, unknown dims, dim not divisible by n_heads, n_heads not
  // divisible by n_kv_heads, or an odd head_dim (RoPE rotates pairs).
  static LlamaDims from_spec(const sharding::ModelSpec& spec);
  // The same checks on dims built by hand (tests); throws std::invalid_argument naming the field.
  void validate() const;
};

// A unit's parameters as the runtime hands them over: one pointer per parameter, in the order of
// sharding::make_llama (views into the unit's all-gathered flat buffer).
using Weights = std::span<const float* const>;
// Same order; every backward ADDS into them (+=), so micro-batches accumulate.
using Grads = std::span<float* const>;

// Parameter counts per unit, in spec order (checked against the spans every call).
inline constexpr size_t kEmbeddingParams = 1;  // tok_embeddings.weight
inline constexpr size_t kBlockParams = 9;      // wq wk wv wo w1 w2 w3 attention_norm ffn_norm
inline constexpr size_t kOutputParams = 2;     // norm.weight output.weight

}  // namespace fsdp::model
