#include "model/output_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "model/fast_exp.h"
#include "model/flush_denormals.h"
#include "model/ops.h"

namespace fsdp::model {
namespace {

enum Param : size_t { kNorm, kOutput };

}  // namespace

OutputHead::OutputHead(const spec::ModelDims& dims, int64_t batch, int64_t seq, MemoryTracker& tracker)
    : dims_(dims), rows_(batch * seq), tracker_(&tracker) {
  spec::validate_transformer(dims_);
  if (batch <= 0 || seq <= 0) {
    throw std::invalid_argument("OutputHead: batch and seq must be positive (got " + std::to_string(batch) + ", " +
                                std::to_string(seq) + ")");
  }
}

void OutputHead::release_saved() {
  saved_.release();
  saved_targets_.release();
}

float OutputHead::forward(Weights w, const float* x, const int32_t* targets) {
  if (w.size() != kOutputParams) throw std::invalid_argument("OutputHead::forward: expected 2 weights");
  const int64_t n = rows_, D = dims_.dim, V = dims_.vocab;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] < 0 || targets[i] >= V) {
      throw std::out_of_range("OutputHead: target " + std::to_string(targets[i]) + " at row " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
  if (saved_.empty()) {
    saved_.reset(*tracker_, MemoryCategory::kActivations, static_cast<size_t>(n * (2 * D + 1 + V)));
    saved_targets_.reset(*tracker_, MemoryCategory::kActivations, static_cast<size_t>(n));
  }
  float* xs = saved_.data();
  float* xn = xs + n * D;
  float* rstd = xn + n * D;
  float* probs = rstd + n;
  std::memcpy(xs, x, sizeof(float) * static_cast<size_t>(n * D));
  std::memcpy(saved_targets_.data(), targets, sizeof(int32_t) * static_cast<size_t>(n));

  ops::rmsnorm_forward(xs, w[kNorm], n, D, dims_.norm_eps, xn, rstd);
  ops::linear_forward(xn, w[kOutput], n, D, V, probs);  // logits: (n, V), turned into probabilities in place
  const FlushDenormals flush;  // model/flush_denormals.h
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    float* row = probs + i * V;
    const float m = *std::max_element(row, row + V);
    // The exponentials in float (exp_fast, within 2 ulp; vectorized), their sum in double.
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += exp_fast(row[j] - m);
    const double lse = m + std::log(sum);
    total += lse - row[targets[i]];
    for (int64_t j = 0; j < V; ++j) row[j] = exp_fast(static_cast<float>(row[j] - lse));
  }
  return static_cast<float>(total / static_cast<double>(n));
}

void OutputHead::backward(Weights w, Grads g, float loss_scale, float* dx) {
  if (w.size() != kOutputParams || g.size() != kOutputParams) {
    throw std::invalid_argument("OutputHead::backward: expected 2 weights and 2 gradients");
  }
  if (saved_.empty()) throw std::logic_error("OutputHead::backward without a saved forward");
  const int64_t n = rows_, D = dims_.dim, V = dims_.vocab;
  float* xs = saved_.data();
  float* xn = xs + n * D;
  float* rstd = xn + n * D;
  float* dlogits = rstd + n;  // the probabilities, turned into d(loss_scale * mean loss)/d logits in place
  const float c = loss_scale / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) {
    float* row = dlogits + i * V;
    row[saved_targets_[static_cast<size_t>(i)]] -= 1.f;
    for (int64_t j = 0; j < V; ++j) row[j] *= c;
  }
  ops::linear_backward_weight(dlogits, xn, n, D, V, g[kOutput]);
  float* dxn = xn;  // norm(x) is no longer needed: reuse it for its gradient
  ops::linear_backward_input(dlogits, w[kOutput], n, D, V, dxn);
  std::memset(dx, 0, sizeof(float) * static_cast<size_t>(n * D));
  ops::rmsnorm_backward(xs, w[kNorm], rstd, dxn, n, D, dx, g[kNorm]);
  release_saved();
}

}  // namespace fsdp::model
