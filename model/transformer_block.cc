#include "model/transformer_block.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "model/attention.h"
#include "model/ops.h"
#include "model/swiglu_ffn.h"

namespace fsdp::model {
namespace {


enum Param : size_t { kWq, kWk, kWv, kWo, kW1, kW2, kW3 };
// The feed-forward's parameters start at kW1 (w1 w2 w3, or the MoE router, experts and shared expert);
// the two norms are always last.
size_t attn_norm_index(size_t count) { return count - 2; }
size_t ffn_norm_index(size_t count) { return count - 1; }

// cos then sin, each (seq, head_dim/2), into buf's seq * head_dim floats.
void fill_rope_tables(const spec::ModelDims& d, int64_t seq, float* buf) {
  ops::rope_table(seq, d.head_dim(), d.rope_theta, buf, buf + seq * d.head_dim() / 2,
                  d.rope_scaling ? &*d.rope_scaling : nullptr);
}

// The tables for this call; small, rebuilt per call rather than kept per block.
struct RopeTables {
  TrackedBuffer<float> buf;
  const float* cos() const { return buf.data(); }
  const float* sin() const { return buf.data() + buf.size() / 2; }
  RopeTables(const spec::ModelDims& d, int64_t seq, MemoryTracker& tracker)
      : buf(tracker, MemoryCategory::kActivations, static_cast<size_t>(seq * d.head_dim())) {
    fill_rope_tables(d, seq, buf.data());
  }
};

void copy_rows(float* dst, const float* src, int64_t n) {
  if (dst != src) std::memmove(dst, src, sizeof(float) * static_cast<size_t>(n));
}

}  // namespace

using spec::ActivationCheckpointing;

TransformerBlock::TransformerBlock(const spec::ModelDims& dims, int64_t batch, int64_t seq, MemoryTracker& tracker,
                                   ActivationCheckpointing ac, ExpertExchange* exchange)
    : dims_(dims), batch_(batch), seq_(seq), rows_(batch * seq), tracker_(&tracker), ac_(ac) {
  spec::validate_transformer(dims_);
  if (batch <= 0 || seq <= 0) {
    throw std::invalid_argument("TransformerBlock: batch and seq must be positive (got " + std::to_string(batch) +
                                ", " + std::to_string(seq) + ")");
  }
  if (dims_.moe.enabled()) {
    // The exchange's group is the expert-parallel group: its size splits the experts.
    const int64_t ep = exchange != nullptr ? exchange->size() : 1;
    moe_ = std::make_unique<MoeFeedForward>(dims_.moe, ep, dims_.dim, rows_, tracker, exchange);
  }
}

int64_t TransformerBlock::saved_elements(const spec::ModelDims& d, int64_t rows) {
  const int64_t ffn = d.moe.enabled() ? 0 : d.ffn_hidden;
  return rows * (6 * d.dim + 2 * d.kv_dim() + 4 * ffn) + rows * (2 + d.n_heads);
}

int64_t TransformerBlock::kept_elements(const spec::ModelDims& d, int64_t rows, ActivationCheckpointing ac) {
  const int64_t ffn = d.moe.enabled() ? 0 : d.ffn_hidden;
  switch (ac) {
    case ActivationCheckpointing::kNone:
      return saved_elements(d, rows);
    case ActivationCheckpointing::kSelective:
      return saved_elements(d, rows) - rows * (3 * d.dim + d.kv_dim() + 3 * ffn + 2);
    case ActivationCheckpointing::kFull:
      return rows * d.dim;
  }
  return 0;
}

void TransformerBlock::release_saved() {
  kept_.release();
  transient_.release();
  if (moe_) moe_->release_saved();
}

const std::vector<int64_t>& TransformerBlock::tokens_per_expert() const {
  static const std::vector<int64_t> kNone;
  return moe_ ? moe_->tokens_per_expert() : kNone;
}

TransformerBlock::Saved TransformerBlock::views() {
  const int64_t n = rows_, D = dims_.dim, KV = dims_.kv_dim(), QD = dims_.q_dim();
  const int64_t F = dims_.moe.enabled() ? 0 : dims_.ffn_hidden;
  const bool none = ac_ == ActivationCheckpointing::kNone, op = ac_ == ActivationCheckpointing::kSelective;
  const bool keep = none || op;  // what the op-level policy keeps too
  float* kept = kept_.data();
  float* transient = transient_.data();
  // Kept tensors are carved from kept_, the others from transient_, each in this order.
  auto take = [&](int64_t width, bool in_kept) {
    float*& p = in_kept ? kept : transient;
    float* v = p;
    p += n * width;
    return v;
  };
  Saved s;
  s.x = take(D, true);
  s.n1 = take(D, none);
  s.q = take(QD, keep);
  s.k = take(KV, none);
  s.v = take(KV, keep);
  s.att = take(QD, keep);
  s.h = take(D, none);
  s.n2 = take(D, none);
  s.a1 = take(F, keep);
  s.a3 = take(F, none);
  s.act = take(F, none);
  s.gate = take(F, none);
  s.rstd1 = take(1, none);
  s.rstd2 = take(1, none);
  s.lse = take(dims_.n_heads, keep);
  return s;
}

void TransformerBlock::check(size_t n_weights, size_t n_grads, const char* op) const {
  const size_t want = param_count();
  if (n_weights != want || n_grads != want) {
    throw std::invalid_argument(std::string("TransformerBlock::") + op + ": expected " +
                                std::to_string(want) + " weights and gradients (got " +
                                std::to_string(n_weights) + " and " + std::to_string(n_grads) + ")");
  }
}

void TransformerBlock::forward(Weights w, const float* x, float* y) {
  check(w.size(), param_count(), "forward");
  const int64_t n = rows_;
  // Every saved tensor below is written whole before it is read.
  if (kept_.empty()) kept_.reset_for_overwrite(*tracker_, MemoryCategory::kActivations, kept_elements(dims_, n, ac_));
  transient_.reset_for_overwrite(*tracker_, MemoryCategory::kActivations, recomputed_elements(dims_, n, ac_));
  const Saved s = views();
  copy_rows(s.x, x, n * dims_.dim);
  run_forward(w, s, y);
  transient_.release();
  if (moe_ && ac_ == ActivationCheckpointing::kFull) moe_->release_saved();
}

void TransformerBlock::run_forward(Weights w, const Saved& s, float* y) {
  const size_t kAttnNorm = attn_norm_index(w.size()), kFfnNorm = ffn_norm_index(w.size());
  const int64_t n = rows_, D = dims_.dim, KV = dims_.kv_dim(), F = dims_.ffn_hidden, QD = dims_.q_dim();
  ops::rmsnorm_forward(s.x, w[kAttnNorm], n, D, dims_.norm_eps, s.n1, s.rstd1);
  ops::linear_forward(s.n1, w[kWq], n, D, QD, s.q);
  ops::linear_forward(s.n1, w[kWk], n, D, KV, s.k);
  ops::linear_forward(s.n1, w[kWv], n, D, KV, s.v);
  {
    const RopeTables rope(dims_, seq_, *tracker_);
    ops::rope_apply(s.q, n, seq_, dims_.n_heads, dims_.head_dim(), rope.cos(), rope.sin(), false);
    ops::rope_apply(s.k, n, seq_, dims_.n_kv_heads, dims_.head_dim(), rope.cos(), rope.sin(), false);
  }
  const AttentionShape as{batch_, seq_, dims_.n_heads, dims_.n_kv_heads, dims_.head_dim()};
  causal_attention_forward(as, s.q, s.k, s.v, s.att, s.lse, *tracker_);
  copy_rows(s.h, s.x, n * D);
  ops::linear_forward(s.att, w[kWo], n, QD, D, s.h, 1.f);  // h = x + att @ wo^T

  ops::rmsnorm_forward(s.h, w[kFfnNorm], n, D, dims_.norm_eps, s.n2, s.rstd2);
  copy_rows(y, s.h, n * D);
  if (moe_) {
    aux_loss_ = moe_->forward(w.subspan(kW1, moe_->param_count()), s.n2, y, 1.f);  // y = h + moe(n2)
  } else {
    swiglu_ffn_forward(s.n2, w[kW1], w[kW2], w[kW3], n, D, F, {s.a1, s.a3, s.act, s.gate}, y, 1.f);  // y = h + ffn
  }
}

void TransformerBlock::recompute(Weights w, const Saved& s, float* y_scratch, float* rope_scratch) {
  if (ac_ == ActivationCheckpointing::kFull) {
    run_forward(w, s, y_scratch);
    return;
  }
  // The op-level policy: the calls forward made, on the kept tensors, in forward's order.
  const size_t kAttnNorm = attn_norm_index(w.size()), kFfnNorm = ffn_norm_index(w.size());
  const int64_t n = rows_, D = dims_.dim, KV = dims_.kv_dim(), F = dims_.ffn_hidden, QD = dims_.q_dim();
  ops::rmsnorm_forward(s.x, w[kAttnNorm], n, D, dims_.norm_eps, s.n1, s.rstd1);
  ops::linear_forward(s.n1, w[kWk], n, D, KV, s.k);
  // The tables in backward's scratch rather than a buffer of their own: nothing above the backward's
  // own peak, which the planner counts.
  fill_rope_tables(dims_, seq_, rope_scratch);
  ops::rope_apply(s.k, n, seq_, dims_.n_kv_heads, dims_.head_dim(), rope_scratch,
                  rope_scratch + seq_ * dims_.head_dim() / 2, false);
  copy_rows(s.h, s.x, n * D);
  ops::linear_forward(s.att, w[kWo], n, QD, D, s.h, 1.f);
  ops::rmsnorm_forward(s.h, w[kFfnNorm], n, D, dims_.norm_eps, s.n2, s.rstd2);
  if (!moe_) {
    ops::linear_forward(s.n2, w[kW3], n, D, F, s.a3);
    ops::swiglu_forward(s.a1, s.a3, s.act, s.gate, n * F);
  }
}

void TransformerBlock::backward(Weights w, Grads g, const float* dy, float* dx, float aux_scale) {
  check(w.size(), g.size(), "backward");
  if (kept_.empty()) throw std::logic_error("TransformerBlock::backward without a saved forward");
  const int64_t n = rows_, D = dims_.dim, KV = dims_.kv_dim(), F = dims_.ffn_hidden, QD = dims_.q_dim();
  const size_t kAttnNorm = attn_norm_index(w.size()), kFfnNorm = ffn_norm_index(w.size());
  // Transient gradients: d n1 / d n2 (n, D), d att (n, QD), dq (n, QD), dk and dv (n, KV); each is
  // written whole (beta 0, or zeroed by the attention backward) before it is read.
  TrackedBuffer<float> scratch;
  scratch.reset_for_overwrite(*tracker_, MemoryCategory::kActivations, static_cast<size_t>(n * (D + 2 * QD + 2 * KV)));
  float* dn = scratch.data();
  float* datt = dn + n * D;
  float* dq = datt + n * QD;
  float* dk = dq + n * QD;
  float* dv = dk + n * KV;
  if (ac_ != ActivationCheckpointing::kNone) {
    transient_.reset_for_overwrite(*tracker_, MemoryCategory::kActivations, recomputed_elements(dims_, n, ac_));
  }
  const Saved s = views();
  // dn and dq are written whole before they are read: a full recompute's block output goes to dn, the
  // op policy's RoPE tables (seq * head_dim <= rows * q_dim floats) to dq.
  if (ac_ != ActivationCheckpointing::kNone) recompute(w, s, dn, dq);

  // FFN. Its saved tensors become its gradient buffers (swiglu_ffn_backward).
  if (moe_) {
    const size_t m = moe_->param_count();
    moe_->backward(w.subspan(kW1, m), g.subspan(kW1, m), s.n2, dy, dn, 0.f, aux_scale);
  } else {
    swiglu_ffn_backward(s.n2, w[kW1], w[kW2], w[kW3], n, D, F, {s.a1, s.a3, s.act, s.gate}, dy, dn, 0.f, g[kW1],
                        g[kW2], g[kW3]);
  }
  copy_rows(dx, dy, n * D);  // dx holds dh from here on; dy is not read again (they may alias)
  ops::rmsnorm_backward(s.h, w[kFfnNorm], s.rstd2, dn, n, D, dx, g[kFfnNorm]);

  // Attention.
  ops::linear_backward_weight(dx, s.att, n, QD, D, g[kWo]);
  ops::linear_backward_input(dx, w[kWo], n, QD, D, datt);
  const AttentionShape as{batch_, seq_, dims_.n_heads, dims_.n_kv_heads, dims_.head_dim()};
  causal_attention_backward(as, s.q, s.k, s.v, s.att, s.lse, datt, dq, dk, dv, *tracker_);
  {
    // The rotation is orthogonal: its backward is the inverse rotation.
    const RopeTables rope(dims_, seq_, *tracker_);
    ops::rope_apply(dq, n, seq_, dims_.n_heads, dims_.head_dim(), rope.cos(), rope.sin(), true);
    ops::rope_apply(dk, n, seq_, dims_.n_kv_heads, dims_.head_dim(), rope.cos(), rope.sin(), true);
  }
  ops::linear_backward_weight(dq, s.n1, n, D, QD, g[kWq]);
  ops::linear_backward_weight(dk, s.n1, n, D, KV, g[kWk]);
  ops::linear_backward_weight(dv, s.n1, n, D, KV, g[kWv]);
  ops::linear_backward_input(dq, w[kWq], n, D, QD, dn);
  ops::linear_backward_input(dk, w[kWk], n, D, KV, dn, 1.f);
  ops::linear_backward_input(dv, w[kWv], n, D, KV, dn, 1.f);
  ops::rmsnorm_backward(s.x, w[kAttnNorm], s.rstd1, dn, n, D, dx, g[kAttnNorm]);

  kept_.release();
  transient_.release();
}

}  // namespace fsdp::model
