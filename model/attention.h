// Causal grouped-query attention, flash-attention style: the (T x T) probabilities are never kept.
// Forward saves only the per-(token, head) log-sum-exp of the scaled scores; backward recomputes the
// probabilities one (batch, head) at a time from q, k and that log-sum-exp in a transient scratch.
#pragma once

#include <cstdint>

#include "common/memory_tracker.h"

namespace fsdp::model {

struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads)
  int64_t head_dim = 0;

  int64_t rows() const { return batch * seq; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

// q: (B*T, n_heads*head_dim), k, v: (B*T, n_kv_heads*head_dim), already rotated (RoPE).
// out: (B*T, n_heads*head_dim) = softmax(q k^T / sqrt(head_dim), causal) v, per head.
// lse: (B*T, n_heads) log-sum-exp of each row of scaled scores, for backward.
// Scratch (T*T floats) is tracked as kActivations and freed before returning.
void causal_attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                              float* lse, MemoryTracker& tracker);

// dout: like out. Writes (does not add) dq: like q, dk and dv: like k and v.
// Scratch (2*T*T floats) is tracked as kActivations and freed before returning.
void causal_attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                               const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
                               MemoryTracker& tracker);

}  // namespace fsdp::model
