#include "model/moe_router.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/ops.h"

namespace fsdp::model {
namespace {

// Scores of one token in place: softmax over the row, or sigmoid per entry.
void score_row(spec::RouterScore score, float* row, int64_t E) {
  if (score == spec::RouterScore::kSigmoid) {
    for (int64_t e = 0; e < E; ++e) row[e] = 1.f / (1.f + std::exp(-row[e]));
    return;
  }
  const float m = *std::max_element(row, row + E);
  double z = 0;
  for (int64_t e = 0; e < E; ++e) z += (row[e] = std::exp(row[e] - m));
  const float inv = static_cast<float>(1.0 / z);
  for (int64_t e = 0; e < E; ++e) row[e] *= inv;
}

// The k largest of `row`, by descending score then ascending index: repeated strict-greater argmax, so
// an equal score never displaces a lower index. k is small (<= 8 in every open model).
void top_k(const float* row, int64_t E, int64_t k, int32_t* out) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < static_cast<int32_t>(E); ++e) {
      if (std::find(out, out + j, e) != out + j) continue;
      if (best < 0 || row[e] > row[best]) best = e;
    }
    out[j] = best;
  }
}

// The per-token quantity p_te the auxiliary loss averages: the scores (softmax), or the scores over
// their row sum (sigmoid). Returns the row sum used (1 for softmax).
double aux_row_sum(spec::RouterScore score, const float* row, int64_t E) {
  if (score == spec::RouterScore::kSoftmax) return 1.0;
  double s = 0;
  for (int64_t e = 0; e < E; ++e) s += row[e];
  return s;
}

// Tokens per expert over the routing choices (before any capacity drop).
std::vector<int64_t> choice_counts(const int32_t* expert, int64_t n, int64_t k, int64_t E) {
  std::vector<int64_t> c(static_cast<size_t>(E), 0);
  for (int64_t i = 0; i < n * k; ++i) ++c[static_cast<size_t>(expert[i])];
  return c;
}

}  // namespace

double router_forward(const spec::MoeSpec& moe, const float* x, const float* gate, int64_t n, int64_t dim,
                      float* scores, int32_t* expert, float* weight) {
  const int64_t E = moe.num_experts, k = moe.top_k;
  ops::linear_forward(x, gate, n, dim, E, scores);
  for (int64_t t = 0; t < n; ++t) {
    float* row = scores + t * E;
    score_row(moe.score, row, E);
    int32_t* ex = expert + t * k;
    float* w = weight + t * k;
    top_k(row, E, k, ex);
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = row[ex[j]]);
    const float norm = moe.route_norm ? static_cast<float>(1.0 / (sum + 1e-20)) : 1.f;
    for (int64_t j = 0; j < k; ++j) w[j] *= norm * moe.route_scale;
  }
  if (moe.aux_loss_coeff == 0.f || n == 0) return 0.0;
  const std::vector<int64_t> count = choice_counts(expert, n, k, E);
  double aux = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = scores + t * E;
    const double inv = 1.0 / aux_row_sum(moe.score, row, E);
    for (int64_t e = 0; e < E; ++e) aux += static_cast<double>(count[static_cast<size_t>(e)]) * row[e] * inv;
  }
  // coeff * sum_e (E / (k n) * count_e) * (1/n * sum_t p_te)
  return moe.aux_loss_coeff * static_cast<double>(E) / (static_cast<double>(k) * n * n) * aux;
}

void router_backward(const spec::MoeSpec& moe, const float* x, const float* gate, int64_t n, int64_t dim, float* scores,
                     const int32_t* expert, const float* dweight, float aux_scale, float* dgate, float* dx) {
  const int64_t E = moe.num_experts, k = moe.top_k;
  const bool aux = moe.aux_loss_coeff != 0.f && n > 0;
  std::vector<int64_t> count;
  double aux_unit = 0;  // d aux / d p_te = aux_unit * count_e
  if (aux) {
    count = choice_counts(expert, n, k, E);
    aux_unit = aux_scale * moe.aux_loss_coeff * static_cast<double>(E) / (static_cast<double>(k) * n * n);
  }
  std::vector<double> ds(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    float* row = scores + t * E;  // s on entry, d logits on exit
    const int32_t* ex = expert + t * k;
    const float* dw = dweight + t * k;
    std::fill(ds.begin(), ds.end(), 0.0);
    // Routing weights: w_j = c * s_j with c = route_scale (/ S, S = sum of the chosen s, if route_norm),
    // so ds_i = c * (dw_i - sum_j dw_j s_j / S) for the chosen i.
    double S = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      S += row[ex[j]];
      dot += static_cast<double>(dw[j]) * row[ex[j]];
    }
    const double c = moe.route_scale / (moe.route_norm ? S + 1e-20 : 1.0);
    for (int64_t j = 0; j < k; ++j) {
      ds[static_cast<size_t>(ex[j])] += c * (dw[j] - (moe.route_norm ? dot / (S + 1e-20) : 0.0));
    }
    if (aux) {
      // p_e = s_e / R (R = 1 for softmax, the row sum for sigmoid): ds_i += (g_i - sum_e g_e p_e) / R.
      const double R = aux_row_sum(moe.score, row, E);
      double gp = 0;
      for (int64_t e = 0; e < E; ++e) gp += aux_unit * static_cast<double>(count[static_cast<size_t>(e)]) * row[e] / R;
      for (int64_t e = 0; e < E; ++e) {
        const double g = aux_unit * static_cast<double>(count[static_cast<size_t>(e)]);
        ds[static_cast<size_t>(e)] += moe.score == spec::RouterScore::kSoftmax ? g : (g - gp) / R;
      }
    }
    if (moe.score == spec::RouterScore::kSoftmax) {
      double sd = 0;
      for (int64_t e = 0; e < E; ++e) sd += ds[static_cast<size_t>(e)] * row[e];
      for (int64_t e = 0; e < E; ++e) row[e] = static_cast<float>(row[e] * (ds[static_cast<size_t>(e)] - sd));
    } else {
      for (int64_t e = 0; e < E; ++e) row[e] = static_cast<float>(ds[static_cast<size_t>(e)] * row[e] * (1.f - row[e]));
    }
  }
  ops::linear_backward_weight(scores, x, n, dim, E, dgate);
  ops::linear_backward_input(scores, gate, n, dim, E, dx, 1.f);
}

}  // namespace fsdp::model
