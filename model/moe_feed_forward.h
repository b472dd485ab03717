// The mixture-of-experts feed-forward that takes the dense SwiGLU's place in a MoE block:
//   y = beta * y + sum_j weight_tj * expert_{e_tj}(x_t)  [+ shared(x_t)]
// router (model/moe_router.h) -> dispatch (model/moe_dispatch.h) -> grouped experts (model/moe_experts.h)
// -> combine, plus an always-on shared SwiGLU expert when spec::MoeSpec::num_shared_experts > 0. The routing
// weights multiply the expert outputs (TorchTitan's score_before_experts = false, as DeepSeek-V3 and
// Qwen3-MoE). Forward returns the load-balancing auxiliary loss; backward takes its scale.
//
// Expert parallelism (expert_parallel = P > 1): the rank holds L = E / P experts and routes only
// its own tokens. Forward: counts go out first (exchange_counts), the expert-major rows xg go to their
// owners (exchange_rows, source-major on arrival), are regrouped expert-major, run through the local
// experts, regrouped back and returned the same way. Backward mirrors it: the gradient of the return
// trip is a dispatch of d yg, the gradient of the dispatch a return of d xg. The experts' gradients hold
// the contributions of every token of the EP group that chose them.
#pragma once

#include <cstdint>
#include <vector>

#include "common/memory_tracker.h"
#include "model/dims.h"
#include "model/moe_expert_exchange.h"
#include "model/swiglu_ffn.h"

namespace fsdp::model {

class MoeFeedForward {
 public:
  // `rows` tokens per call, `dim` wide; moe must be enabled (validated here).
  // expert_parallel: ranks the experts are split over (the mesh's EP degree; 1: all local).
  // exchange: required when expert_parallel > 1 (and of that size), ignored otherwise; must outlive this.
  MoeFeedForward(const spec::MoeSpec& moe, int64_t expert_parallel, int64_t dim, int64_t rows, MemoryTracker& tracker,
                 ExpertExchange* exchange = nullptr);

  // w: param_count() pointers in spec order: router gate (E, dim); w1 (H, dim), w2 (dim, H),
  // w3 (H, dim) of the local experts (0..E-1 without expert parallelism); shared w1 (Hs, dim), w2 (dim, Hs), w3 (Hs,
  // dim) if any. x, y: (rows, dim), y = beta * y + moe(x); x must stay unchanged until backward, which reads it again
  // (the block keeps it saved anyway). Returns the auxiliary loss of this call (0 if its coefficient is).
  double forward(Weights w, const float* x, float* y, float beta);
  // dy: (rows, dim); dx = d x + dx_beta * dx, must not alias dy. ADDS into g (order of w). aux_scale is
  // d loss / d aux, normally the scale the step's loss gets. Frees the saved tensors; throws
  // std::logic_error without a preceding forward.
  void backward(Weights w, Grads g, const float* x, const float* dy, float* dx, float dx_beta, float aux_scale);

  void release_saved();
  int64_t saved_bytes() const { return saved_.bytes() + saved_index_.bytes() + ep_saved_.bytes(); }
  // Tokens each expert took in the last forward (after capacity drops): (E).
  const std::vector<int64_t>& tokens_per_expert() const { return counts_; }
  // (token, expert) pairs the last forward dropped for capacity (0 when dropless).
  int64_t dropped() const { return rows_ * moe_.top_k - grouped_rows_; }

  // Floats / int32s one forward keeps over `rows` tokens (grouped arrays sized for the dropless n*k):
  //   rows * (E + 2k)                         scores, routing weights, their gradients
  //   rows * k * (2*dim + 4*H)                grouped inputs and outputs, each expert's SwiGLU saves (4*H
  //                                           without expert parallelism only: under it ep_saved_ holds
  //                                           the SwiGLU saves of the rows the rank received)
  //   rows * 4*Hs                             the shared expert's SwiGLU saves
  static int64_t saved_elements(const spec::MoeSpec& moe, int64_t expert_parallel, int64_t dim, int64_t rows);
  static int64_t saved_index_elements(const spec::MoeSpec& moe, int64_t rows) { return 3 * rows * moe.top_k; }
  // The weights a call takes: moe_param_count of this rank's experts.
  size_t param_count() const { return moe_param_count(moe_, ep_); }

 private:
  struct Views {
    float *scores, *weight, *dweight, *xg, *yg;
    SwigluSaved experts, shared;  // each array (rows * k, H) and (rows, Hs)
    int32_t *expert, *row_of_choice, *token_of_row;
  };
  Views views();
  void check(size_t n_weights, size_t n_grads, const char* op) const;
  // The local experts under expert parallelism, between dispatch and combine: xg, yg (grouped_rows_, dim).
  void parallel_experts_forward(Weights experts, const float* xg, float* yg);
  // yg holds d yg on entry and d xg on return.
  void parallel_experts_backward(Weights experts, Grads grads, float* yg);
  // Views of ep_saved_ over the rows this rank received: expert-major inputs and outputs, the
  // source-major arrival buffer, and the SwiGLU saves of the local experts.
  struct ParallelViews {
    float *xe, *ye, *arrived;
    SwigluSaved experts;  // each array (received, H)
  };
  ParallelViews parallel_views();

  spec::MoeSpec moe_;
  int64_t ep_ = 1;  // expert_parallel
  int64_t local_experts_ = 0;
  int64_t dim_, rows_;
  MemoryTracker* tracker_;
  TrackedBuffer<float> saved_;
  TrackedBuffer<int32_t> saved_index_;
  std::vector<int64_t> counts_;
  int64_t grouped_rows_ = 0;
  ExpertExchange* exchange_ = nullptr;
  // Expert parallelism, kept from forward to backward: send_rows_ (P), recv_counts_ (P, L),
  // recv_rows_ (P), local_counts_ (L), received_ = sum(recv_rows_).
  std::vector<int64_t> send_rows_, recv_counts_, recv_rows_, local_counts_;
  int64_t received_ = 0;
  TrackedBuffer<float> ep_saved_;
};

}  // namespace fsdp::model
