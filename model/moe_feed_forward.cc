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

// Consecutive views of one buffer: take(count) returns the next count floats.
struct Carve {
  float* p;
  float* operator()(int64_t count) {
    float* v = p;
    p += count;
    return v;
  }
  // The four (count)-float arrays one SwiGLU keeps for backward.
  SwigluSaved swiglu(int64_t count) {
    SwigluSaved s;
    s.a1 = (*this)(count);
    s.a3 = (*this)(count);
    s.act = (*this)(count);
    s.gate = (*this)(count);
    return s;
  }
};

}  // namespace

MoeFeedForward::MoeFeedForward(const spec::MoeSpec& moe, int64_t expert_parallel, int64_t dim, int64_t rows,
                               MemoryTracker& tracker, ExpertExchange* exchange)
    : moe_(moe),
      ep_(expert_parallel),
      dim_(dim),
      rows_(rows),
      tracker_(&tracker),
      counts_(static_cast<size_t>(moe.num_experts), 0) {
  spec::validate(moe_);
  if (ep_ < 1 || moe_.num_experts % ep_ != 0) {
    throw std::invalid_argument("MoeFeedForward: expert_parallel = " + std::to_string(ep_) +
                                " must divide num_experts = " + std::to_string(moe_.num_experts));
  }
  local_experts_ = local_experts(moe_, ep_);
  if (ep_ > 1) {
    if (exchange == nullptr || exchange->size() != ep_) {
      throw std::invalid_argument("MoeFeedForward: expert_parallel = " + std::to_string(ep_) +
                                  " needs an expert exchange of that size (got " +
                                  (exchange ? std::to_string(exchange->size()) : std::string("none")) + ")");
    }
    exchange_ = exchange;
    const auto p = static_cast<size_t>(ep_), l = static_cast<size_t>(local_experts_);
    send_rows_.resize(p);
    recv_counts_.resize(p * l);
    recv_rows_.resize(p);
    local_counts_.resize(l);
  }
  if (dim <= 0 || rows <= 0) {
    throw std::invalid_argument("MoeFeedForward: dim and rows must be positive (got " + std::to_string(dim) + ", " +
                                std::to_string(rows) + ")");
  }
}

int64_t MoeFeedForward::saved_elements(const spec::MoeSpec& m, int64_t expert_parallel, int64_t dim, int64_t rows) {
  // Under expert parallelism the experts' SwiGLU saves are those of the rows received (ep_saved_).
  const int64_t expert_saves = expert_parallel > 1 ? 0 : 4 * m.expert_hidden;
  return rows * (m.num_experts + 2 * m.top_k) + rows * m.top_k * (2 * dim + expert_saves) +
         rows * 4 * m.shared_hidden();
}

MoeFeedForward::Views MoeFeedForward::views() {
  const int64_t n = rows_, R = rows_ * moe_.top_k, H = moe_.expert_hidden, Hs = moe_.shared_hidden();
  Carve take{saved_.data()};
  Views v{};
  v.scores = take(n * moe_.num_experts);
  v.weight = take(n * moe_.top_k);
  v.dweight = take(n * moe_.top_k);
  v.xg = take(R * dim_);
  v.yg = take(R * dim_);
  if (ep_ <= 1) v.experts = take.swiglu(R * H);  // else parallel_views() holds them
  v.shared = take.swiglu(n * Hs);
  v.expert = saved_index_.data();
  v.row_of_choice = v.expert + R;
  v.token_of_row = v.row_of_choice + R;
  return v;
}

void MoeFeedForward::check(size_t n_weights, size_t n_grads, const char* op) const {
  if (n_weights != param_count() || n_grads != param_count()) {
    throw std::invalid_argument(std::string("MoeFeedForward::") + op + ": expected " + std::to_string(param_count()) +
                                " weights and gradients for " + std::to_string(local_experts_) +
                                " local experts (got " + std::to_string(n_weights) + " and " + std::to_string(n_grads) +
                                ")");
  }
}

void MoeFeedForward::release_saved() {
  saved_.release();
  saved_index_.release();
  ep_saved_.release();
}

MoeFeedForward::ParallelViews MoeFeedForward::parallel_views() {
  const int64_t r = received_, H = moe_.expert_hidden;
  Carve take{ep_saved_.data()};
  ParallelViews v;
  v.xe = take(r * dim_);
  v.ye = take(r * dim_);
  v.arrived = take(r * dim_);
  v.experts = take.swiglu(r * H);
  return v;
}

void MoeFeedForward::parallel_experts_forward(Weights experts, const float* xg, float* yg) {
  const int64_t P = ep_, L = local_experts_, E = moe_.num_experts;
  rows_per_owner(counts_.data(), E, P, send_rows_.data());
  exchange_->exchange_counts(counts_.data(), E, recv_counts_.data());
  received_ = 0;
  std::fill(local_counts_.begin(), local_counts_.end(), 0);
  for (int64_t s = 0; s < P; ++s) {
    recv_rows_[static_cast<size_t>(s)] = 0;
    for (int64_t l = 0; l < L; ++l) {
      const int64_t c = recv_counts_[static_cast<size_t>(s * L + l)];
      recv_rows_[static_cast<size_t>(s)] += c;
      local_counts_[static_cast<size_t>(l)] += c;
    }
    received_ += recv_rows_[static_cast<size_t>(s)];
  }
  // One float at least, so the views are never null even when no token chose a local expert.
  ep_saved_.reset_for_overwrite(*tracker_, MemoryCategory::kActivations,
                                std::max<int64_t>(1, received_ * (3 * dim_ + 4 * moe_.expert_hidden)));
  const ParallelViews v = parallel_views();
  exchange_->exchange_rows(xg, send_rows_.data(), v.arrived, recv_rows_.data(), dim_);
  source_to_expert_major(v.arrived, recv_counts_.data(), P, L, dim_, v.xe);
  grouped_experts_forward(experts, local_counts_.data(), v.xe, dim_, moe_.expert_hidden, v.experts,
                          v.ye);
  expert_to_source_major(v.ye, recv_counts_.data(), P, L, dim_, v.arrived);
  exchange_->exchange_rows(v.arrived, recv_rows_.data(), yg, send_rows_.data(), dim_);
}

void MoeFeedForward::parallel_experts_backward(Weights experts, Grads grads, float* yg) {
  const int64_t P = ep_, L = local_experts_;
  const ParallelViews v = parallel_views();
  // d yg travels as the tokens did; the local experts turn it into d xe; d xg travels back.
  exchange_->exchange_rows(yg, send_rows_.data(), v.arrived, recv_rows_.data(), dim_);
  source_to_expert_major(v.arrived, recv_counts_.data(), P, L, dim_, v.ye);
  grouped_experts_backward(experts, grads, local_counts_.data(), v.xe, dim_, moe_.expert_hidden,
                           v.experts, v.ye);
  expert_to_source_major(v.ye, recv_counts_.data(), P, L, dim_, v.arrived);
  exchange_->exchange_rows(v.arrived, recv_rows_.data(), yg, send_rows_.data(), dim_);
}

double MoeFeedForward::forward(Weights w, const float* x, float* y, float beta) {
  check(w.size(), param_count(), "forward");
  const int64_t n = rows_, k = moe_.top_k, E = moe_.num_experts;
  if (saved_.empty()) {
    saved_.reset_for_overwrite(*tracker_, MemoryCategory::kActivations, saved_elements(moe_, ep_, dim_, n));
    saved_index_.reset_for_overwrite(*tracker_, MemoryCategory::kActivations, saved_index_elements(moe_, n));
  }
  const Views v = views();

  const double aux = router_forward(moe_, x, w[0], n, dim_, v.scores, v.expert, v.weight);
  grouped_rows_ = group_by_expert(v.expert, n, k, E, expert_capacity(moe_.capacity_factor, n, k, E), counts_.data(),
                                  v.row_of_choice, v.token_of_row);
  gather_rows(x, v.token_of_row, grouped_rows_, dim_, v.xg);
  const size_t L = static_cast<size_t>(local_experts_);
  if (exchange_) {
    parallel_experts_forward(w.subspan(1, 3 * L), v.xg, v.yg);
  } else {
    grouped_experts_forward(w.subspan(1, 3 * L), counts_.data(), v.xg, dim_, moe_.expert_hidden,
                            v.experts, v.yg);
  }
  if (moe_.num_shared_experts > 0) {
    const size_t s = 1 + 3 * L;
    swiglu_ffn_forward(x, w[s], w[s + 1], w[s + 2], n, dim_, moe_.shared_hidden(), v.shared,
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
  const int64_t n = rows_, k = moe_.top_k;
  const size_t L = static_cast<size_t>(local_experts_);
  const Views v = views();

  if (moe_.num_shared_experts > 0) {
    const size_t s = 1 + 3 * L;
    swiglu_ffn_backward(x, w[s], w[s + 1], w[s + 2], n, dim_, moe_.shared_hidden(),
                        v.shared, dy, dx, dx_beta, g[s], g[s + 1], g[s + 2]);
  } else {
    scale_by_beta(dx, n * dim_, dx_beta);
  }
  // yg becomes d yg in place (each grouped row is read, then written, once), then d xg.
  combine_rows_backward(dy, v.yg, v.weight, v.row_of_choice, n, k, dim_, v.yg, v.dweight);
  if (exchange_) {
    parallel_experts_backward(w.subspan(1, 3 * L), g.subspan(1, 3 * L), v.yg);
  } else {
    grouped_experts_backward(w.subspan(1, 3 * L), g.subspan(1, 3 * L), counts_.data(), v.xg, dim_,
                             moe_.expert_hidden, v.experts, v.yg);
  }
  scatter_add_rows(v.yg, v.token_of_row, grouped_rows_, dim_, dx);
  router_backward(moe_, x, w[0], n, dim_, v.scores, v.expert, v.dweight, aux_scale, g[0], dx);
  release_saved();
}

}  // namespace fsdp::model
