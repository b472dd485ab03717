// A tiny MLP for the runtime's tests: every unit is y = act(W x + b) with W (out, in) and b (out),
// tanh on all but the last unit, loss = mean over samples of 0.5 * ||y - target||^2. Shapes are odd
// so shards get padding. Forward and backward are naive loops: the point is the FSDP plumbing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spec/model_spec.h"

namespace fsdp::testing {

struct ToyModel {
  std::vector<int64_t> widths{4, 5, 7, 3};  // input, hidden..., output; unit u maps widths[u] -> widths[u+1]

  int units() const { return static_cast<int>(widths.size()) - 1; }
  spec::ModelSpec spec() const;
  // Deterministic initial values of unit u's full parameters (independent of ranks).
  void init(int u, std::span<float* const> params) const;
  // Input and target of global sample `id`.
  void sample(int64_t id, float* x, float* target) const;

  // One unit over a batch: x (batch, in) -> y (batch, out).
  void forward(int u, std::span<const float* const> w, const std::vector<float>& x, std::vector<float>& y,
               int64_t batch) const;
  // dy -> dx, adding dW and db into g. y is the unit's forward output.
  void backward(int u, std::span<const float* const> w, std::span<float* const> g, const std::vector<float>& x,
                const std::vector<float>& y, const std::vector<float>& dy, std::vector<float>& dx,
                int64_t batch) const;
};

}  // namespace fsdp::testing
