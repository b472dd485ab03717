// Naive double-precision reference of the MoE feed-forward for the model tests, written from the
// definitions (model/moe_router.h, model/moe_feed_forward.h) and sharing no code with model/: every token
// ranks all experts by sorting, and each chosen expert's SwiGLU is computed for that token alone, densely.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "model/dims.h"
#include "tests/model/reference.h"

namespace fsdp::model::testing {

struct RefMoe {
  Vec y;                                  // (n, dim)
  double aux = 0;                         // the load-balancing loss
  std::vector<std::vector<int>> chosen;   // per token, its k experts by descending score (ties: lower index)
  std::vector<std::vector<bool>> kept;    // per token and choice: not dropped for capacity
};

// The test MoE: 4 experts of width 8, top 2, aux loss 0.05, with the given routing and shared experts.
inline spec::MoeSpec moe_dims(spec::RouterScore score, bool norm, float scale, int64_t shared, float capacity) {
  spec::MoeSpec m;
  m.num_experts = 4;
  m.top_k = 2;
  m.expert_hidden = 8;
  m.num_shared_experts = shared;
  m.score = score;
  m.route_norm = norm;
  m.route_scale = scale;
  m.aux_loss_coeff = 0.05f;
  m.capacity_factor = capacity;
  return m;
}

inline std::vector<int64_t> moe_param_sizes(const spec::MoeSpec& m, int64_t dim) {
  std::vector<int64_t> s{m.num_experts * dim};
  for (int64_t e = 0; e < m.num_experts; ++e) {
    s.insert(s.end(), {m.expert_hidden * dim, dim * m.expert_hidden, m.expert_hidden * dim});
  }
  if (m.num_shared_experts > 0) s.insert(s.end(), {m.shared_hidden() * dim, dim * m.shared_hidden(), m.shared_hidden() * dim});
  return s;
}

// One token's SwiGLU: (silu(x w1^T) * x w3^T) w2^T with w1, w3: (H, dim), w2: (dim, H).
inline Vec ref_swiglu_row(const double* x, const Vec& w1, const Vec& w2, const Vec& w3, int64_t dim, int64_t H) {
  Vec g(static_cast<size_t>(H)), out(static_cast<size_t>(dim), 0.0);
  for (int64_t h = 0; h < H; ++h) {
    double a1 = 0, a3 = 0;
    for (int64_t c = 0; c < dim; ++c) {
      a1 += x[c] * w1[h * dim + c];
      a3 += x[c] * w3[h * dim + c];
    }
    g[h] = a1 / (1.0 + std::exp(-a1)) * a3;
  }
  for (int64_t c = 0; c < dim; ++c)
    for (int64_t h = 0; h < H; ++h) out[c] += g[h] * w2[c * H + h];
  return out;
}

// w: gate, then w1 w2 w3 per expert, then shared w1 w2 w3 (spec::MoeSpec::param_count()); x: (n, dim).
inline RefMoe ref_moe(const spec::MoeSpec& m, int64_t n, int64_t dim, const std::vector<Vec>& w, const Vec& x) {
  const int64_t E = m.num_experts, k = m.top_k;
  RefMoe r;
  r.y.assign(static_cast<size_t>(n * dim), 0.0);
  std::vector<Vec> p(static_cast<size_t>(n));  // the per-token quantity the aux loss averages
  std::vector<int64_t> taken(static_cast<size_t>(E), 0), chosen_count(static_cast<size_t>(E), 0);
  const int64_t capacity =
      m.capacity_factor > 0 ? static_cast<int64_t>(std::ceil(static_cast<double>(m.capacity_factor) * n * k / E)) : -1;
  for (int64_t t = 0; t < n; ++t) {
    const double* xt = &x[static_cast<size_t>(t * dim)];
    Vec s(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t c = 0; c < dim; ++c) l += xt[c] * w[0][e * dim + c];
      s[e] = l;
    }
    if (m.score == spec::RouterScore::kSoftmax) {
      const double mx = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - mx));
      for (double& v : s) v /= z;
      p[t] = s;
    } else {
      for (double& v : s) v = 1.0 / (1.0 + std::exp(-v));
      const double z = std::accumulate(s.begin(), s.end(), 0.0);
      p[t] = s;
      for (double& v : p[t]) v /= z;
    }
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
    order.resize(static_cast<size_t>(k));
    double sum = 0;
    for (int e : order) sum += s[e];
    r.chosen.push_back(order);
    r.kept.emplace_back();
    for (int e : order) {
      ++chosen_count[e];
      const bool keep = capacity < 0 || taken[e] < capacity;
      r.kept.back().push_back(keep);
      if (!keep) continue;
      ++taken[e];
      const double weight = s[e] / (m.route_norm ? sum : 1.0) * m.route_scale;
      const Vec o = ref_swiglu_row(xt, w[1 + 3 * e], w[2 + 3 * e], w[3 + 3 * e], dim, m.expert_hidden);
      for (int64_t c = 0; c < dim; ++c) r.y[t * dim + c] += weight * o[c];
    }
    if (m.num_shared_experts > 0) {
      const size_t b = 1 + 3 * static_cast<size_t>(E);
      const Vec o = ref_swiglu_row(xt, w[b], w[b + 1], w[b + 2], dim, m.shared_hidden());
      for (int64_t c = 0; c < dim; ++c) r.y[t * dim + c] += o[c];
    }
  }
  // aux = coeff * sum_e f_e P_e, f_e = E/(k n) * tokens that chose e, P_e = mean_t p_te.
  for (int64_t e = 0; e < E; ++e) {
    double P = 0;
    for (int64_t t = 0; t < n; ++t) P += p[t][e] / static_cast<double>(n);
    r.aux += static_cast<double>(E) / static_cast<double>(k * n) * static_cast<double>(chosen_count[e]) * P;
  }
  r.aux *= m.aux_loss_coeff;
  return r;
}

// A MoE block: wq wk wv wo, the MoE parameters, attention_norm ffn_norm; y = h + moe(ffn_norm(h)).
struct RefMoeBlock {
  Vec y;
  double aux = 0;
};
inline RefMoeBlock ref_moe_block(const spec::ModelDims& d, int64_t B, int64_t T, const std::vector<Vec>& w,
                                 const Vec& x) {
  const size_t m = moe_param_count(d.moe, 1);
  const Vec h = ref_attention_residual(d, B, T, w[0], w[1], w[2], w[3], w[4 + m], x);
  const Vec n2 = ref_rmsnorm(h, w[5 + m], B * T, d.dim, d.norm_eps);
  const RefMoe r = ref_moe(d.moe, B * T, d.dim, std::vector<Vec>(w.begin() + 4, w.begin() + 4 + static_cast<long>(m)), n2);
  RefMoeBlock out{h, r.aux};
  for (size_t i = 0; i < out.y.size(); ++i) out.y[i] += r.y[i];
  return out;
}

}  // namespace fsdp::model::testing
