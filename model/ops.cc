#include "model/ops.h"

#include <cblas.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "model/fast_exp.h"
#include "model/flush_denormals.h"

namespace fsdp::model::ops {
namespace {

blasint to_blas(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw std::length_error(std::string("model gemm: ") + what + " = " + std::to_string(v) +
                            " does not fit the BLAS integer");
  }
  return static_cast<blasint>(v);
}

std::atomic<int64_t> g_matmul_flops{0};

}  // namespace

int64_t matmul_flops() { return g_matmul_flops.load(std::memory_order_relaxed); }
void reset_matmul_flops() { g_matmul_flops.store(0, std::memory_order_relaxed); }

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
int blas_threads() { return openblas_get_num_threads(); }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  g_matmul_flops.fetch_add(2 * m * n * k, std::memory_order_relaxed);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              to_blas(m, "m"), to_blas(n, "n"), to_blas(k, "k"), alpha, a, to_blas(lda, "lda"), b,
              to_blas(ldb, "ldb"), beta, c, to_blas(ldc, "ldc"));
}

void linear_forward(const float* x, const float* w, int64_t n, int64_t in, int64_t out, float* y, float beta) {
  gemm(false, true, n, out, in, 1.f, x, in, w, in, beta, y, out);
}

void linear_backward_weight(const float* dy, const float* x, int64_t n, int64_t in, int64_t out, float* dw) {
  gemm(true, false, out, in, n, 1.f, dy, out, x, in, 1.f, dw, in);
}

void linear_backward_input(const float* dy, const float* w, int64_t n, int64_t in, int64_t out, float* dx,
                           float beta) {
  gemm(false, false, n, in, out, 1.f, dy, out, w, in, beta, dx, in);
}

void rmsnorm_forward(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y, float* rstd) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    double ss = 0;  // double: the mean of squares of a wide row loses bits in fp32
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const float s = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    rstd[r] = s;
    for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * s * w[j];
  }
}

void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, int64_t n, int64_t d,
                      float* dx, float* dw) {
  // y_j = x_j s w_j with s = (mean(x^2) + eps)^(-1/2), ds/dx_k = -s^3 x_k / d, so
  // dx_k = s w_k dy_k - x_k s^3 / d * sum_j dy_j w_j x_j.
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    float* dxr = dx + r * d;
    const float s = rstd[r];
    double dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      dot += static_cast<double>(dyr[j]) * w[j] * xr[j];
      dw[j] += dyr[j] * xr[j] * s;
    }
    const float c = static_cast<float>(dot) * s * s * s / static_cast<float>(d);
    for (int64_t j = 0; j < d; ++j) dxr[j] += s * w[j] * dyr[j] - c * xr[j];
  }
}

double rope_frequency(int64_t i, int64_t head_dim, double theta, const spec::RopeScaling* scaling) {
  const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  if (scaling == nullptr) return freq;
  const spec::RopeScaling& s = *scaling;
  const double wavelength = 2 * std::numbers::pi / freq;
  if (wavelength < s.original_context / s.high_freq_factor) return freq;
  if (wavelength > s.original_context / s.low_freq_factor) return freq / s.factor;
  const double smooth = (s.original_context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * freq / s.factor + smooth * freq;
}

void rope_table(int64_t seq, int64_t head_dim, float theta, float* cos, float* sin, const spec::RopeScaling* scaling) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double freq = rope_frequency(i, head_dim, static_cast<double>(theta), scaling);
    for (int64_t t = 0; t < seq; ++t) {
      const double angle = static_cast<double>(t) * freq;
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope_apply(float* x, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim, const float* cos,
                const float* sin, bool inverse) {
  const int64_t half = head_dim / 2;
  const float sign = inverse ? -1.f : 1.f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos + (r % seq) * half;
    const float* s = sin + (r % seq) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* p = x + r * heads * head_dim + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // (a + ib) * (cos + i sign sin)
        const float a = p[2 * i], b = p[2 * i + 1], sn = sign * s[i];
        p[2 * i] = a * c[i] - b * sn;
        p[2 * i + 1] = a * sn + b * c[i];
      }
    }
  }
}

// __restrict: the four arrays never overlap, and without it GCC does not vectorize the loop.
void swiglu_forward(const float* __restrict a1, const float* __restrict a3, float* __restrict act,
                    float* __restrict gate, int64_t count) {
  const FlushDenormals flush;  // model/flush_denormals.h
  for (int64_t i = 0; i < count; ++i) {
    act[i] = a1[i] / (1.f + exp_fast(-a1[i]));
    gate[i] = act[i] * a3[i];
  }
}

void swiglu_backward(const float* __restrict dgate, const float* __restrict act, float* __restrict a1,
                     float* __restrict a3, int64_t count) {
  const FlushDenormals flush;  // model/flush_denormals.h
  for (int64_t i = 0; i < count; ++i) {
    const float sig = 1.f / (1.f + exp_fast(-a1[i]));
    const float da1 = dgate[i] * a3[i] * (sig * (1.f + a1[i] * (1.f - sig)));
    a3[i] = dgate[i] * act[i];
    a1[i] = da1;
  }
}

}  // namespace fsdp::model::ops
