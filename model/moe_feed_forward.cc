#include "model/moe_feed_forward.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/moe_dispatch.h"
#include "model/moe_experts.h"
#include "model/moe_router.h"
#include "model/swiglu_ffn.h"

namespace fsdp::model {
namespace {

// p = beta * p over `count` floats, for an output no kernel writes with beta (no shared expert).
void scale_by_beta(float* p, int64_t count, float beta) {
  if (beta == 0.f) {
    std::fill(p, p + count, 0.f);
  } else if (beta != 1.f) {
    for (int64_t i = 0; i < count; ++i) p[i] *= beta;
  }
}

}  // namespace

MoeFeedForward::MoeFeedForward(const MoeDims& moe, int64_t dim, int64_t rows, MemoryTracker& tracker)
    : moe_(moe), dim_(dim), rows_(rows), tracker_(&tracker), counts_(static_cast<size_t>(moe.num_experts), 0) {
  moe_.validate();
  if (dim <= 0 || rows <= 0) {
    throw std::invalid_argument("MoeFeedForward: dim and rows must be positive (got " + std::to_string(dim) + ", " +
                                std::to_string(rows) + ")");
  }
}

int64_t MoeFeedForward::saved_elements(const MoeDims& m, int64_t dim, int64_t rows) {
  return rows * (m.num_experts + 2 * m.top_k) + rows * m.top_k * (2 * dim + 4 * m.expert_hidden) +
         rows * 4 * m.shared_hidden();
}

MoeFeedForward::Views MoeFeedForward::views() {
  const int64_t n = rows_, R = rows_ * moe_.top_k, H = moe_.expert_hidden, Hs = moe_.shared_hidden();
  float* p = saved_.data();
  auto take = [&](int64_t count) {
    float* v = p;
    p += count;
    return v;
  };
  Views v;
  v.scores = take(n * moe_.num_experts);
  v.weight = take(n * moe_.top_k);
  v.dweight = take(n * moe_.top_k);
  v.xg = take(R * dim_);
  v.yg = take(R * dim_);
  v.a1 = take(R * H);
  v.a3 = take(R * H);
  v.act = take(R * H);
  v.gate = take(R * H);
  v.s_a1 = take(n * Hs);
  v.s_a3 = take(n * Hs);
  v.s_act = take(n * Hs);
  v.s_gate = take(n * Hs);
  v.expert = saved_index_.data();
  v.row_of_choice = v.expert + R;
  v.token_of_row = v.row_of_choice + R;
  return v;
}

void MoeFeedForward::check(size_t n_weights, size_t n_grads, const char* op) const {
  if (n_weights != moe_.param_count() || n_grads != moe_.param_count()) {
    throw std::invalid_argument(std::string("MoeFeedForward::") + op + ": expected " +
                                std::to_string(moe_.param_count()) + " weights and gradients for " +
                                std::to_string(moe_.num_experts) + " experts (got " + std::to_string(n_weights) +
                                " and " + std::to_string(n_grads) + ")");
  }
}

void MoeFeedForward::release_saved() {
  saved_.release();
  saved_index_.release();
}

double MoeFeedForward::forward(Weights w, const float* x, float* y, float beta) {
  check(w.size(), moe_.param_count(), "forward");
  const int64_t n = rows_, k = moe_.top_k, E = moe_.num_experts;
  if (saved_.empty()) {
    saved_.reset_for_overwrite(*tracker_, MemoryCategory::kActivations, saved_elements(moe_, dim_, n));
    saved_index_.reset_for_overwrite(*tracker_, MemoryCategory::kActivations, saved_index_elements(moe_, n));
  }
  const Views v = views();

  const double aux = router_forward(moe_, x, w[0], n, dim_, v.scores, v.expert, v.weight);
  grouped_rows_ = group_by_expert(v.expert, n, k, E, expert_capacity(moe_.capacity_factor, n, k, E), counts_.data(),
                                  v.row_of_choice, v.token_of_row);
  // Under expert parallelism: xg's expert-major blocks go out through all_to_all_v here ...
  gather_rows(x, v.token_of_row, grouped_rows_, dim_, v.xg);
  grouped_experts_forward(w.subspan(1, 3 * static_cast<size_t>(E)), counts_.data(), v.xg, dim_, moe_.expert_hidden,
                          {v.a1, v.a3, v.act, v.gate}, v.yg);
  // ... and yg comes back through the reverse all_to_all_v here, in the same row order.
  if (moe_.num_shared_experts > 0) {
    const size_t s = 1 + 3 * static_cast<size_t>(E);
    swiglu_ffn_forward(x, w[s], w[s + 1], w[s + 2], n, dim_, moe_.shared_hidden(), {v.s_a1, v.s_a3, v.s_act, v.s_gate},
                       y, beta);
  } else {
    scale_by_beta(y, n * dim_, beta);
  }
  combine_rows(v.yg, v.weight, v.row_of_choice, n, k, dim_, y);
  return aux;
}

void MoeFeedForward::backward(Weights w, Grads g, const float* x, const float* dy, float* dx, float dx_beta,
                              float aux_scale) {
  check(w.size(), g.size(), "backward");
  if (saved_.empty()) throw std::logic_error("MoeFeedForward::backward without a saved forward");
  const int64_t n = rows_, k = moe_.top_k, E = moe_.num_experts;
  const Views v = views();

  if (moe_.num_shared_experts > 0) {
    const size_t s = 1 + 3 * static_cast<size_t>(E);
    swiglu_ffn_backward(x, w[s], w[s + 1], w[s + 2], n, dim_, moe_.shared_hidden(),
                        {v.s_a1, v.s_a3, v.s_act, v.s_gate}, dy, dx, dx_beta, g[s], g[s + 1], g[s + 2]);
  } else {
    scale_by_beta(dx, n * dim_, dx_beta);
  }
  // yg becomes d yg in place (each grouped row is read, then written, once), then d xg.
  combine_rows_backward(dy, v.yg, v.weight, v.row_of_choice, n, k, dim_, v.yg, v.dweight);
  grouped_experts_backward(w.subspan(1, 3 * static_cast<size_t>(E)), g.subspan(1, 3 * static_cast<size_t>(E)),
                           counts_.data(), v.xg, dim_, moe_.expert_hidden, {v.a1, v.a3, v.act, v.gate}, v.yg);
  scatter_add_rows(v.yg, v.token_of_row, grouped_rows_, dim_, dx);
  router_backward(moe_, x, w[0], n, dim_, v.scores, v.expert, v.dweight, aux_scale, g[0], dx);
  release_saved();
}

}  // namespace fsdp::model
