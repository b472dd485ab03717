// Building blocks shared by the modules: nn.Linear over cblas_sgemm, RMSNorm, RoPE, SiLU.
// All tensors are row-major fp32; N is the number of token rows (B*T).
#pragma once

#include <cstdint>

#include "spec/model_spec.h"

namespace fsdp::model::ops {

// Linear layers in nn.Linear layout: W is (out, in) row-major, y = x @ W^T.
// y: (n, out) = x: (n, in) @ W^T; beta = 1 adds into y (residual), 0 overwrites.
void linear_forward(const float* x, const float* w, int64_t n, int64_t in, int64_t out, float* y, float beta = 0.f);
// dw: (out, in) += dy^T: (out, n) @ x: (n, in).
void linear_backward_weight(const float* dy, const float* x, int64_t n, int64_t in, int64_t out, float* dw);
// dx: (n, in) = dy: (n, out) @ W: (out, in), plus beta * dx.
void linear_backward_input(const float* dy, const float* w, int64_t n, int64_t in, int64_t out, float* dx,
                           float beta = 0.f);

// General row-major C = alpha * op(A) @ op(B) + beta * C with explicit leading dimensions (for per-head
// slices of (B*T, heads*head_dim) tensors). Throws std::length_error if a size exceeds the BLAS int.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Matmul FLOPs (2 m n k per gemm) this process executed since the last reset, every thread summed: the
// independent count the planner's per-layer FLOPs are checked against (tests/model/flop_count_test.cc).
// One relaxed atomic add per gemm call.
int64_t matmul_flops();
void reset_matmul_flops();

// OpenBLAS's thread count for this process (its OPENBLAS_NUM_THREADS is read once, at library load).
void set_blas_threads(int threads);
int blas_threads();

// RMSNorm over rows of width d: y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps).
// x, y: (n, d); w: (d); rstd: (n), saved for backward. y may alias x.
void rmsnorm_forward(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y, float* rstd);
// dx: (n, d) += d(loss)/dx; dw: (d) += d(loss)/dw, given dy = d(loss)/dy and the saved rstd.
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, int64_t n, int64_t d,
                      float* dx, float* dw);

// Llama 3.1's RoPE frequency scaling (TorchTitan's RoPEScalingArgs, which its llama3 models apply):
// pairs whose wavelength 2 pi / freq exceeds original_context / low_freq_factor turn `factor` times
// slower, those under original_context / high_freq_factor keep their frequency, and those between
// interpolate: freq ((1 - s) / factor + s) with s = (original_context / wavelength - low_freq_factor) /
// (high_freq_factor - low_freq_factor). The settings are the model's (spec::RopeScaling).
// The rotation frequency of pair i (radians per position): theta^(-2i/head_dim), scaled when `scaling`.
double rope_frequency(int64_t i, int64_t head_dim, double theta, const spec::RopeScaling* scaling);

// RoPE tables for positions 0..seq-1: cos, sin: (seq, head_dim/2), angle pos * rope_frequency(i).
void rope_table(int64_t seq, int64_t head_dim, float theta, float* cos, float* sin,
                const spec::RopeScaling* scaling = nullptr);
// Rotates adjacent pairs (2i, 2i+1) of every head in place; x: (batch*seq, heads*head_dim), the row's
// position is its index within its sequence (row % seq). inverse = true applies the transpose rotation,
// which is the backward of the forward rotation.
void rope_apply(float* x, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim, const float* cos,
                const float* sin, bool inverse);

// SwiGLU's elementwise part in one pass over (count) elements: act = silu(a1), gate = act * a3, with
// silu(a) = a * sigmoid(a).
void swiglu_forward(const float* a1, const float* a3, float* act, float* gate, int64_t count);
// Its backward in one pass, in place: a1 <- dgate * a3 * silu'(a1), a3 <- dgate * act, with
// silu'(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a))).
void swiglu_backward(const float* dgate, const float* act, float* a1, float* a3, int64_t count);

}  // namespace fsdp::model::ops
