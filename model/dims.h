// Transformer dimensions of the reference Llama model, and the checks the kernels rely on.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "model/ops.h"
#include "spec/model_spec.h"

namespace fsdp::model {

// How the router turns logits into scores (TorchTitan's MoEArgs.score_func): softmax over the experts
// (Mixtral, Qwen3-MoE) or an independent sigmoid per expert (DeepSeek-V3, Llama 4).
enum class RouterScore { kSoftmax, kSigmoid };

// The mixture-of-experts feed-forward of a block (model/moe_feed_forward.h); num_experts == 0 is the
// dense SwiGLU FFN. Names follow TorchTitan's MoEArgs where they mean the same thing.
struct MoeDims {
  int64_t num_experts = 0;
  int64_t top_k = 0;               // experts per token
  int64_t expert_hidden = 0;       // width of each expert's SwiGLU
  int64_t num_shared_experts = 0;  // > 0: one always-on SwiGLU of width num_shared_experts * expert_hidden
  RouterScore score = RouterScore::kSoftmax;
  bool route_norm = false;   // divide the k routing weights of a token by their sum
  float route_scale = 1.f;   // then multiply them by this
  // Coefficient of the load-balancing auxiliary loss (Switch / DeepSeek "batch-level" form over the
  // micro-batch, see moe_router.h); 0 turns it off. Not TorchTitan's load_balance_coeff, which is the
  // update rate of its auxiliary-loss-free expert bias.
  float aux_loss_coeff = 0.f;
  // 0: dropless. > 0: each expert takes at most ceil(capacity_factor * tokens * top_k / num_experts)
  // (token, expert) pairs, first come (lowest token row) first served; the rest are dropped.
  float capacity_factor = 0.f;
  // Expert parallelism: the experts are split evenly over a group of this many ranks, which exchange
  // token rows through a model::ExpertExchange (model/moe_expert_exchange.h); the feed-forward of one
  // rank holds experts [ep_rank * local_experts(), (ep_rank + 1) * local_experts()). 1: all experts local.
  int64_t expert_parallel = 1;

  bool enabled() const { return num_experts > 0; }
  int64_t shared_hidden() const { return num_shared_experts * expert_hidden; }
  int64_t local_experts() const { return num_experts / expert_parallel; }
  // Parameters of the MoE feed-forward in spec order: router gate, w1 w2 w3 of each local expert, shared
  // w1 w2 w3.
  size_t param_count() const {
    return 1 + 3 * static_cast<size_t>(local_experts()) + (num_shared_experts > 0 ? 3 : 0);
  }
  // Throws std::invalid_argument naming the field (top_k outside [1, num_experts], widths, factors,
  // expert_parallel not dividing num_experts).
  void validate() const;
};

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
  MoeDims moe;  // disabled: the dense SwiGLU FFN of width ffn_hidden

  int64_t head_dim() const { return dim / n_heads; }
  int64_t q_dim() const { return n_heads * head_dim(); }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }

  // MoE specs give a MoE block (moe from the spec's experts, widths and routing; dropless). Throws
  // std::invalid_argument for unknown dims, dim not divisible by n_heads, n_heads not
  // divisible by n_kv_heads, or an odd head_dim (RoPE rotates pairs).
  static LlamaDims from_spec(const spec::ModelSpec& spec);
  // The same checks on dims built by hand (tests); throws std::invalid_argument naming the field.
  void validate() const;
};

// A unit's parameters as the runtime hands them over: one pointer per parameter, in the order of
// spec::make_llama (views into the unit's all-gathered flat buffer).
using Weights = std::span<const float* const>;
// Same order; every backward ADDS into them (+=), so micro-batches accumulate.
using Grads = std::span<float* const>;

// Parameter counts per unit, in spec order (checked against the spans every call).
inline constexpr size_t kEmbeddingParams = 1;  // tok_embeddings.weight
inline constexpr size_t kBlockParams = 9;      // wq wk wv wo w1 w2 w3 attention_norm ffn_norm
// A MoE block: wq wk wv wo, the MoE feed-forward's MoeDims::param_count(), attention_norm ffn_norm.
inline size_t block_param_count(const LlamaDims& d) { return d.moe.enabled() ? 6 + d.moe.param_count() : kBlockParams; }
inline constexpr size_t kOutputParams = 2;
// Where a MoE block's routed experts start: after wq wk wv wo and the router gate.
inline constexpr size_t kBlockExpertsAt = 5;     // norm.weight output.weight

}  // namespace fsdp::model
