#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/fast_exp.h"
#include "model/flush_denormals.h"
#include "model/ops.h"

namespace fsdp::model {
namespace {


// Pointers to one (batch, head) slice of q/k/v-shaped tensors; rows are strided by the full width.
struct HeadSlice {
  int64_t q_off, kv_off;
};
HeadSlice slice(const AttentionShape& s, int64_t b, int64_t h) {
  const int64_t g = h / (s.n_heads / s.n_kv_heads);
  return {b * s.seq * s.q_dim() + h * s.head_dim, b * s.seq * s.kv_dim() + g * s.head_dim};
}

float softmax_scale(const AttentionShape& s) { return 1.f / std::sqrt(static_cast<float>(s.head_dim)); }

// p: (T, T) scaled scores in, causal probabilities out (zero above the diagonal), given each row's
// log-sum-exp.
void probabilities_from_lse(float* p, int64_t seq, const float* lse, int64_t lse_stride) {
  for (int64_t i = 0; i < seq; ++i) {
    float* row = p + i * seq;
    const float l = lse[i * lse_stride];
    for (int64_t j = 0; j <= i; ++j) row[j] = exp_fast(row[j] - l);
    std::fill(row + i + 1, row + seq, 0.f);
  }
}

}  // namespace

void causal_attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                              float* lse, MemoryTracker& tracker) {
  const FlushDenormals flush;  // model/flush_denormals.h
  const int64_t T = s.seq, hd = s.head_dim, qd = s.q_dim(), kvd = s.kv_dim();
  TrackedBuffer<float> scores;  // every (b, h) writes all of it (GEMM with beta 0, softmax, zeros)
  scores.reset_for_overwrite(tracker, MemoryCategory::kActivations, static_cast<size_t>(T * T));
  float* p = scores.data();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const HeadSlice o = slice(s, b, h);
      float* head_lse = lse + b * T * s.n_heads + h;  // stride n_heads per row
      // p: (T, T) = q_h: (T, hd) @ k_g^T / sqrt(hd)
      ops::gemm(false, true, T, T, hd, softmax_scale(s), q + o.q_off, qd, k + o.kv_off, kvd, 0.f, p, T);
      // Causal softmax of each row in place, keeping its log-sum-exp for backward: exponentials in
      // one vectorized pass, their sum in double.
      for (int64_t i = 0; i < T; ++i) {
        float* row = p + i * T;
        const float m = *std::max_element(row, row + i + 1);
        for (int64_t j = 0; j <= i; ++j) row[j] = exp_fast(row[j] - m);
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += row[j];
        head_lse[i * s.n_heads] = m + static_cast<float>(std::log(sum));
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        std::fill(row + i + 1, row + T, 0.f);
      }
      // out_h: (T, hd) = p: (T, T) @ v_g: (T, hd)
      ops::gemm(false, false, T, hd, T, 1.f, p, T, v + o.kv_off, kvd, 0.f, out + o.q_off, qd);
    }
  }
}

void causal_attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                               const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
                               MemoryTracker& tracker) {
  const FlushDenormals flush;  // model/flush_denormals.h
  const int64_t T = s.seq, hd = s.head_dim, qd = s.q_dim(), kvd = s.kv_dim();
  const float scale = softmax_scale(s);
  TrackedBuffer<float> scratch;  // p and dp: each written whole by a GEMM with beta 0 before use
  scratch.reset_for_overwrite(tracker, MemoryCategory::kActivations, static_cast<size_t>(2 * T * T));
  float* p = scratch.data();
  float* dp = p + T * T;
  // Heads of one group add into the same kv gradient.
  std::memset(dk, 0, sizeof(float) * static_cast<size_t>(s.rows() * kvd));
  std::memset(dv, 0, sizeof(float) * static_cast<size_t>(s.rows() * kvd));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const HeadSlice o = slice(s, b, h);
      const float* qh = q + o.q_off;
      const float* kg = k + o.kv_off;
      const float* vg = v + o.kv_off;
      const float* oh = out + o.q_off;
      const float* doh = dout + o.q_off;
      ops::gemm(false, true, T, T, hd, scale, qh, qd, kg, kvd, 0.f, p, T);
      probabilities_from_lse(p, T, lse + b * T * s.n_heads + h, s.n_heads);
      // dv_g: (T, hd) += p^T: (T, T) @ dout_h: (T, hd)
      ops::gemm(true, false, T, hd, T, 1.f, p, T, doh, qd, 1.f, dv + o.kv_off, kvd);
      // dp: (T, T) = dout_h @ v_g^T
      ops::gemm(false, true, T, T, hd, 1.f, doh, qd, vg, kvd, 0.f, dp, T);
      // Softmax backward: ds_ij = p_ij (dp_ij - sum_j p_ij dp_ij), and sum_j p_ij dp_ij = dout_i . out_i.
      for (int64_t i = 0; i < T; ++i) {
        double di = 0;
        for (int64_t d = 0; d < hd; ++d) di += static_cast<double>(doh[i * qd + d]) * oh[i * qd + d];
        float* dpr = dp + i * T;
        const float* pr = p + i * T;
        for (int64_t j = 0; j < T; ++j) dpr[j] = pr[j] * (dpr[j] - static_cast<float>(di));
      }
      // dq_h: (T, hd) = scale * ds @ k_g;  dk_g += scale * ds^T @ q_h
      ops::gemm(false, false, T, hd, T, scale, dp, T, kg, kvd, 0.f, dq + o.q_off, qd);
      ops::gemm(true, false, T, hd, T, scale, dp, T, qh, qd, 1.f, dk + o.kv_off, kvd);
    }
  }
}

}  // namespace fsdp::model
