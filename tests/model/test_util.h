// Shared helpers of the model tests: tiny dims, parameter sets with gradient buffers, and a central
// finite-difference check against the double-precision reference (reference.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/dims.h"
#include "model/ops.h"
#include "tests/model/reference.h"

namespace fsdp::model::testing {

// dim 16, 2 heads of 8, hidden 32, vocab 11; kv_heads 1 (grouped-query) or 2 (multi-head).
inline spec::ModelDims tiny_dims(int64_t kv_heads) {
  spec::ModelDims d;
  d.dim = 16;
  d.layers = 2;
  d.n_heads = 2;
  d.n_kv_heads = kv_heads;
  d.ffn_hidden = 32;
  d.vocab = 11;
  return d;
}
inline constexpr int64_t kBatch = 2;
inline constexpr int64_t kSeq = 5;

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float mean = 0.f, float stddev = 1.f) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// A gradient after two identical backward passes against the one after a single pass. Reductions
// over tokens accumulate straight into the gradient (GEMM with beta 1, norm and embedding sums), so
// g + g comes out in another summation order than 2g: equal within rounding, and nowhere near the
// 1x an overwrite would leave.
inline void expect_accumulated_twice(const std::vector<float>& twice, const std::vector<float>& once,
                                     const std::string& what) {
  ASSERT_EQ(twice.size(), once.size()) << what;
  for (size_t j = 0; j < once.size(); ++j) {
    const float want = 2 * once[j];
    ASSERT_NEAR(twice[j], want, 1e-5f * std::max(1.0f, std::abs(want))) << what << "[" << j << "]";
  }
}

// Element counts of a unit's parameters in spec order.
inline std::vector<int64_t> block_param_sizes(const spec::ModelDims& d) {
  const int64_t D = d.dim, QD = d.q_dim(), KV = d.kv_dim(), F = d.ffn_hidden;
  return {QD * D, KV * D, KV * D, D * QD, F * D, D * F, F * D, D, D};
}
inline std::vector<int64_t> head_param_sizes(const spec::ModelDims& d) { return {d.dim, d.vocab * d.dim}; }

// A unit's parameters (matrices N(0, 0.3), vectors N(1, 0.2) so a norm weight's gradient matters)
// with zeroed gradient buffers, as the runtime's views would hand them over.
struct ParamSet {
  std::vector<std::vector<float>> values, grads;
  std::vector<const float*> w;
  std::vector<float*> g;

  ParamSet(const std::vector<int64_t>& sizes, const std::vector<bool>& is_vector, std::mt19937& rng) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      values.push_back(is_vector[i] ? random_floats(static_cast<size_t>(sizes[i]), rng, 1.f, 0.2f)
                                    : random_floats(static_cast<size_t>(sizes[i]), rng, 0.f, 0.3f));
      grads.emplace_back(static_cast<size_t>(sizes[i]), 0.f);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      w.push_back(values[i].data());
      g.push_back(grads[i].data());
    }
  }
  Weights weights() const { return w; }
  Grads grad_views() const { return g; }
  std::vector<Vec> as_double() const {
    std::vector<Vec> out;
    for (const auto& v : values) out.push_back(to_double(v));
    return out;
  }
};

inline ParamSet block_params(const spec::ModelDims& d, std::mt19937& rng) {
  return ParamSet(block_param_sizes(d), {false, false, false, false, false, false, false, true, true}, rng);
}
inline ParamSet head_params(const spec::ModelDims& d, std::mt19937& rng) {
  return ParamSet(head_param_sizes(d), {true, false}, rng);
}

// Compares the fp32 analytic gradient with central differences of the double-precision `loss` at up to
// `samples` entries of theta (all of them when it is small). The reference is exact to ~1e-9, so the
// tolerance only has to absorb fp32 rounding in the model (observed: under 1e-5 relative): per entry
// |a - fd| <= 5e-4 |fd| + 5e-5 max|fd|, and over the sampled entries ||a - fd|| <= 3e-4 ||fd||. A wrong
// sign, a missing term or a transposed matrix is off by O(|fd|). Also requires the gradient to be non-trivial, so the check cannot pass
// vacuously.
inline void expect_gradient_matches(const std::string& what, Vec& theta, const float* analytic,
                                    const std::function<double()>& loss, std::mt19937& rng, size_t samples = 24) {
  std::vector<size_t> idx;
  if (theta.size() <= samples) {
    for (size_t i = 0; i < theta.size(); ++i) idx.push_back(i);
  } else {
    std::uniform_int_distribution<size_t> pick(0, theta.size() - 1);
    for (size_t s = 0; s < samples; ++s) idx.push_back(pick(rng));
  }
  const double h = 1e-5;
  std::vector<double> fd(idx.size());
  for (size_t s = 0; s < idx.size(); ++s) {
    double& t = theta[idx[s]];
    const double saved = t;
    t = saved + h;
    const double lp = loss();
    t = saved - h;
    const double lm = loss();
    t = saved;
    fd[s] = (lp - lm) / (2 * h);
  }
  double max_fd = 0, err2 = 0, ref2 = 0;
  for (double v : fd) max_fd = std::max(max_fd, std::abs(v));
  ASSERT_GT(max_fd, 1e-5) << what << ": gradient is ~0 at every sampled entry; the check would be vacuous";
  for (size_t s = 0; s < idx.size(); ++s) {
    const double a = analytic[idx[s]];
    EXPECT_LE(std::abs(a - fd[s]), 5e-4 * std::abs(fd[s]) + 5e-5 * max_fd)
        << what << "[" << idx[s] << "]: analytic " << a << " vs finite difference " << fd[s];
    err2 += (a - fd[s]) * (a - fd[s]);
    ref2 += fd[s] * fd[s];
  }
  EXPECT_LE(std::sqrt(err2), 3e-4 * std::sqrt(ref2)) << what << ": relative error over sampled entries";
}

inline void expect_near_all(const std::string& what, const std::vector<float>& got, const Vec& want, double atol,
                            double rtol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::abs(got[i] - want[i]), atol + rtol * std::abs(want[i]))
        << what << "[" << i << "]: " << got[i] << " vs reference " << want[i];
  }
}

}  // namespace fsdp::model::testing
