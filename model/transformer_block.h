// One Llama 3 decoder block (pre-norm, RoPE + causal GQA attention, SwiGLU FFN):
//   h   = x + wo(attention(rope(wq(n1)), rope(wk(n1)), wv(n1)))   with n1 = attention_norm(x)
//   out = h + w2(silu(w1(n2)) * w3(n2))                           with n2 = ffn_norm(h)
// or, when dims.moe is enabled, out = h + moe(n2) with the MoE feed-forward of model/moe_feed_forward.h.
//
// Activation checkpointing (the block's own mode; spec::block_ac picks it per layer): forward computes
// every tensor, keeps those of its mode and frees the rest; backward recomputes the rest with the same
// functions on the same inputs in the same order, so the gradients are bitwise those of mode none.
//   none:      keeps everything backward reads;
//   selective: the op-level policy of TorchTitan's TOML releases: matmul and attention outputs are kept
//              except every second matmul of the block (wk, wo, w3 of wq wk wv wo w1 w3 w2), elementwise
//              results are recomputed. Kept: x, q (after RoPE: the same bytes as wq's output), v, the
//              attention output and its log-sum-exp, w1's output. Recomputed: attention_norm, k = wk(n1)
//              with RoPE, h = x + wo(att), ffn_norm, w3's output, silu and the product. A MoE block
//              recomputes the same attention side and its norms; the MoE feed-forward keeps its saves;
//   full:      keeps its input x only and reruns the whole forward inside backward.
#pragma once

#include <cstdint>
#include <memory>

#include "common/memory_tracker.h"
#include "model/dims.h"
#include "model/moe_feed_forward.h"
#include "spec/policy.h"

namespace fsdp::model {

class TransformerBlock {
 public:
  // batch * seq rows per call; sequences are contiguous runs of seq rows (RoPE position = row % seq).
  // exchange: the expert-parallel group of a MoE block whose experts are split over several ranks (its
  // size is the EP degree, see model/moe_feed_forward.h); it must outlive the block.
  TransformerBlock(const spec::ModelDims& dims, int64_t batch, int64_t seq, MemoryTracker& tracker,
                   spec::ActivationCheckpointing ac = spec::ActivationCheckpointing::kNone,
                   ExpertExchange* exchange = nullptr);

  // w: the unit's block_param_count(dims) parameters in spec order (wq wk wv wo w1 w2 w3 attention_norm
  // ffn_norm; a MoE block has the MoE feed-forward's parameters in place of w1 w2 w3).
  // x, y: (B*T, dim). Saves its own copy of x (and everything backward needs), so the caller may reuse
  // x's buffer afterwards; y may alias x. A second forward before backward overwrites the saved tensors.
  void forward(Weights w, const float* x, float* y);
  // dy: (B*T, dim). Writes (does not add) dx: (B*T, dim), which may alias dy; ADDS the parameter
  // gradients into g (same order as w). Consumes the saved tensors (uses them as scratch) and frees them;
  // throws std::logic_error without a preceding forward. aux_scale: d loss / d (this block's aux_loss()),
  // the step's loss scale; a dense block ignores it.
  void backward(Weights w, Grads g, const float* dy, float* dx, float aux_scale = 1.f);

  // The MoE load-balancing loss of the last forward (0 for a dense block); the caller adds it to the loss.
  double aux_loss() const { return aux_loss_; }
  // Tokens per expert of the last forward (empty for a dense block).
  const std::vector<int64_t>& tokens_per_expert() const;

  // Frees the saved tensors without a backward (e.g. an evaluation forward).
  void release_saved();
  // Bytes held for backward now: 0, or kept_elements(dims, batch*seq, mode) * 4 after a forward (plus the
  // MoE feed-forward's own saves, except in mode full).
  // The parameters a call takes: block_param_count(dims, EP degree).
  size_t param_count() const { return moe_ ? 6 + moe_->param_count() : kBlockParams; }
  int64_t saved_bytes() const { return kept_.bytes() + transient_.bytes() + (moe_ ? moe_->saved_bytes() : 0); }
  spec::ActivationCheckpointing checkpointing() const { return ac_; }
  // Floats one forward saves for backward over `rows` tokens:
  //   rows * (6*dim + 2*kv_dim + 4*ffn_hidden)   x, n1, q, k, v (after RoPE), attention output, h, n2,
  //                                              w1 out, w3 out, silu(w1 out), their product (a MoE
  //                                              block: no ffn_hidden term; MoeFeedForward saves its own)
  //   + rows * (2 + n_heads)                     rstd of both norms, softmax log-sum-exp per head
  static int64_t saved_elements(const spec::ModelDims& dims, int64_t rows);
  // Floats kept from forward to backward under checkpointing mode `ac` (saved_elements for none), and
  // the floats recomputed in backward (held during forward and again during backward):
  //   selective: rows * (3*dim + kv_dim + 3*ffn_hidden + 2) recomputed (n1, k, h, n2, w3 out, silu out,
  //              product, both rstd);
  //   full:      everything but x (rows * dim kept).
  static int64_t kept_elements(const spec::ModelDims& dims, int64_t rows, spec::ActivationCheckpointing ac);
  static int64_t recomputed_elements(const spec::ModelDims& dims, int64_t rows, spec::ActivationCheckpointing ac) {
    return saved_elements(dims, rows) - kept_elements(dims, rows, ac);
  }

 private:
  // Views into kept_ and transient_, each (rows, width).
  struct Saved {
    float *x, *n1, *q, *k, *v, *att, *h, *n2, *a1, *a3, *act, *gate;
    float *rstd1, *rstd2, *lse;
  };
  Saved views();
  // Everything forward computes after copying its input into s.x; y = the block output.
  void run_forward(Weights w, const Saved& s, float* y);
  // Rebuilds in transient_ what mode ac_ dropped; y_scratch: (rows, dim), rope_scratch: seq * head_dim
  // floats, both overwritten.
  void recompute(Weights w, const Saved& s, float* y_scratch, float* rope_scratch);
  void check(size_t n_weights, size_t n_grads, const char* op) const;

  spec::ModelDims dims_;
  int64_t batch_, seq_, rows_;
  MemoryTracker* tracker_;
  spec::ActivationCheckpointing ac_;
  TrackedBuffer<float> kept_;       // kept from forward to backward, views carved by views()
  TrackedBuffer<float> transient_;  // what checkpointing drops: live during forward and during backward
  std::unique_ptr<MoeFeedForward> moe_;  // the FFN of a MoE block
  double aux_loss_ = 0;
};

}  // namespace fsdp::model
