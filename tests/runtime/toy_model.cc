#include "toy_model.h"

#include <cmath>
#include <string>

#include "common/splitmix.h"

namespace fsdp::testing {
namespace {

float hash_value(uint64_t a, uint64_t b) {  // deterministic value in [-1, 1)
  const uint64_t z = splitmix64(a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull);
  return static_cast<float>(static_cast<double>(z >> 11) / 4503599627370496.0 - 1.0);
}

}  // namespace

spec::ModelSpec ToyModel::spec() const {
  spec::ModelSpec m;
  m.name = "toy";
  for (int u = 0; u < units(); ++u) {
    const std::string n = "fc" + std::to_string(u);
    m.units.push_back(spec::UnitSpec{
        n,
        false,
        {spec::ParamSpec{n + ".weight", {widths[u + 1], widths[u]}}, spec::ParamSpec{n + ".bias", {widths[u + 1]}}}});
  }
  return m;
}

void ToyModel::init(int u, std::span<float* const> params) const {
  const int64_t out = widths[u + 1], in = widths[u];
  for (int64_t i = 0; i < out * in; ++i) params[0][i] = 0.6f * hash_value(100 + u, i);
  for (int64_t i = 0; i < out; ++i) params[1][i] = 0.1f * hash_value(200 + u, i);
}

void ToyModel::sample(int64_t id, float* x, float* target) const {
  for (int64_t i = 0; i < widths.front(); ++i) x[i] = hash_value(1000 + id, i);
  for (int64_t i = 0; i < widths.back(); ++i) target[i] = 0.5f * hash_value(5000 + id, i);
}

void ToyModel::forward(int u, std::span<const float* const> w, const std::vector<float>& x, std::vector<float>& y,
                       int64_t batch) const {
  const int64_t out = widths[u + 1], in = widths[u];
  y.assign(static_cast<size_t>(batch * out), 0.f);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t o = 0; o < out; ++o) {
      float z = w[1][o];
      for (int64_t i = 0; i < in; ++i) z += w[0][o * in + i] * x[b * in + i];
      y[b * out + o] = u + 1 < units() ? std::tanh(z) : z;
    }
  }
}

void ToyModel::backward(int u, std::span<const float* const> w, std::span<float* const> g, const std::vector<float>& x,
                        const std::vector<float>& y, const std::vector<float>& dy, std::vector<float>& dx,
                        int64_t batch) const {
  const int64_t out = widths[u + 1], in = widths[u];
  dx.assign(static_cast<size_t>(batch * in), 0.f);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t o = 0; o < out; ++o) {
      const float a = y[b * out + o];
      const float dz = u + 1 < units() ? dy[b * out + o] * (1 - a * a) : dy[b * out + o];
      g[1][o] += dz;
      for (int64_t i = 0; i < in; ++i) {
        g[0][o * in + i] += dz * x[b * in + i];
        dx[b * in + i] += dz * w[0][o * in + i];
      }
    }
  }
}

}  // namespace fsdp::testing
