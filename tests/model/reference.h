// Naive double-precision reference of the Llama block, attention and loss for the model tests: loops
// written straight from the definitions (explicit T x T softmax with a -inf mask, RoPE as a complex
// multiplication), sharing no code with model/. Tensors are flat row-major std::vector<double>.
#pragma once

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "model/dims.h"

namespace fsdp::model::testing {

using Vec = std::vector<double>;

// y: (n, out) = x: (n, in) @ w^T, w: (out, in).
inline Vec ref_linear(const Vec& x, const Vec& w, int64_t n, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(n * out), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

inline Vec ref_rmsnorm(const Vec& x, const Vec& w, int64_t n, int64_t d, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < d; ++j) ms += x[r * d + j] * x[r * d + j];
    const double s = 1.0 / std::sqrt(ms / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] * s * w[j];
  }
  return y;
}

// Rotates pair i of each head by pos * theta^(-2i/head_dim), pos = row % seq.
// Frequency of rotary pair i, with Llama 3.1 scaling as TorchTitan's precompute_freqs_cis writes it
// (its torch.where steps in order: scale the long wavelengths, then overwrite the medium band with the
// interpolation of the scaled and the original frequency).
inline double ref_rope_frequency(int64_t i, int64_t hd, double theta, const std::optional<spec::RopeScaling>& scaling) {
  double freqs = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(hd));
  if (!scaling) return freqs;
  const double original = freqs;
  const double wavelen = 2 * M_PI / original;
  const double high_freq_wavelen = scaling->original_context / scaling->high_freq_factor;
  const double low_freq_wavelen = scaling->original_context / scaling->low_freq_factor;
  if (wavelen > low_freq_wavelen) freqs = freqs / scaling->factor;
  const double smooth_factor = (scaling->original_context / wavelen - scaling->low_freq_factor) /
                               (scaling->high_freq_factor - scaling->low_freq_factor);
  const double smoothed = (1 - smooth_factor) * freqs / scaling->factor + smooth_factor * freqs;
  const bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
  return is_medium ? smoothed : freqs;
}

inline void ref_rope(Vec& x, int64_t rows, int64_t seq, int64_t heads, int64_t hd, double theta,
                     const std::optional<spec::RopeScaling>& scaling = std::nullopt) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double angle = static_cast<double>(r % seq) * ref_rope_frequency(i, hd, theta, scaling);
        double* p = &x[(r * heads + h) * hd + 2 * i];
        const std::complex<double> z = std::complex<double>(p[0], p[1]) * std::polar(1.0, angle);
        p[0] = z.real();
        p[1] = z.imag();
      }
}

// q: (B*T, H*hd), k, v: (B*T, KV*hd) -> out: (B*T, H*hd); explicit causal softmax per (b, h).
inline Vec ref_attention(const Vec& q, const Vec& k, const Vec& v, int64_t B, int64_t T, int64_t H, int64_t KV,
                         int64_t hd) {
  const int64_t qd = H * hd, kvd = KV * hd;
  Vec out(static_cast<size_t>(B * T * qd), 0.0);
  std::vector<double> p(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / KV);
      for (int64_t i = 0; i < T; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double s = -std::numeric_limits<double>::infinity();
          if (j <= i) {
            s = 0;
            for (int64_t d = 0; d < hd; ++d) s += q[(b * T + i) * qd + h * hd + d] * k[(b * T + j) * kvd + g * hd + d];
            s /= std::sqrt(static_cast<double>(hd));
          }
          p[j] = s;
          m = std::max(m, s);
        }
        double z = 0;
        for (int64_t j = 0; j < T; ++j) z += (p[j] = std::exp(p[j] - m));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < hd; ++d)
            out[(b * T + i) * qd + h * hd + d] += p[j] / z * v[(b * T + j) * kvd + g * hd + d];
      }
    }
  return out;
}

// The block's attention half: h = x + wo(attention(...)(attention_norm(x))); x, h: (B*T, dim).
inline Vec ref_attention_residual(const spec::ModelDims& d, int64_t B, int64_t T, const Vec& wq, const Vec& wk,
                                  const Vec& wv, const Vec& wo, const Vec& attention_norm, const Vec& x) {
  const int64_t n = B * T, D = d.dim, QD = d.q_dim(), KV = d.kv_dim(), hd = d.head_dim();
  const Vec n1 = ref_rmsnorm(x, attention_norm, n, D, d.norm_eps);
  Vec q = ref_linear(n1, wq, n, D, QD), k = ref_linear(n1, wk, n, D, KV);
  const Vec v = ref_linear(n1, wv, n, D, KV);
  ref_rope(q, n, T, d.n_heads, hd, d.rope_theta, d.rope_scaling);
  ref_rope(k, n, T, d.n_kv_heads, hd, d.rope_theta, d.rope_scaling);
  const Vec att = ref_attention(q, k, v, B, T, d.n_heads, d.n_kv_heads, hd);
  const Vec o = ref_linear(att, wo, n, QD, D);
  Vec h(x.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = x[i] + o[i];
  return h;
}

// params: wq wk wv wo w1 w2 w3 attention_norm ffn_norm; x, result: (B*T, dim).
inline Vec ref_block(const spec::ModelDims& d, int64_t B, int64_t T, const std::vector<Vec>& w, const Vec& x) {
  const int64_t n = B * T, D = d.dim, F = d.ffn_hidden;
  Vec h = ref_attention_residual(d, B, T, w[0], w[1], w[2], w[3], w[7], x);
  const Vec n2 = ref_rmsnorm(h, w[8], n, D, d.norm_eps);
  const Vec a1 = ref_linear(n2, w[4], n, D, F), a3 = ref_linear(n2, w[6], n, D, F);
  Vec gate(a1.size());
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = a1[i] / (1.0 + std::exp(-a1[i])) * a3[i];
  const Vec f = ref_linear(gate, w[5], n, F, D);
  for (size_t i = 0; i < h.size(); ++i) h[i] += f[i];
  return h;
}

// params: norm.weight, output.weight; mean cross-entropy over the n rows of x: (n, dim).
inline double ref_head_loss(const spec::ModelDims& d, int64_t n, const std::vector<Vec>& w, const Vec& x,
                            const std::vector<int32_t>& targets) {
  const Vec logits = ref_linear(ref_rmsnorm(x, w[0], n, d.dim, d.norm_eps), w[1], n, d.dim, d.vocab);
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < d.vocab; ++j) m = std::max(m, logits[r * d.vocab + j]);
    double z = 0;
    for (int64_t j = 0; j < d.vocab; ++j) z += std::exp(logits[r * d.vocab + j] - m);
    total += m + std::log(z) - logits[r * d.vocab + targets[static_cast<size_t>(r)]];
  }
  return total / static_cast<double>(n);
}

}  // namespace fsdp::model::testing
