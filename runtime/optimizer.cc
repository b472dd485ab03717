#include "runtime/optimizer.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/fsdp_model.h"

namespace fsdp::runtime {
namespace {

void check_shapes(const char* who, std::span<float> param, std::span<const float> grad,
                  std::span<const std::span<float>> state, size_t count) {
  bool ok = grad.size() == param.size() && state.size() == count;
  for (const auto& s : state) ok = ok && s.size() == param.size();
  if (!ok) {
    throw std::invalid_argument(std::string(who) + "::update_shard: param of " + std::to_string(param.size()) +
                                " elements, grad of " + std::to_string(grad.size()) + ", " +
                                std::to_string(state.size()) + " state buffers (want " + std::to_string(count) +
                                " of the param's size)");
  }
}

}  // namespace

void ShardedOptimizer::step(FsdpModel& model, double lr, const std::function<void(int unit)>& after_unit) {
  ++step_;
  for (int u = 0; u < model.num_units(); ++u) {
    FsdpUnit& unit = model.unit(u);
    const std::vector<std::span<float>> st = state(u);
    update_shard(unit.master_shard(), unit.grad_shard(), st, step_, lr);
    if (after_unit) after_unit(u);
  }
}

AdamW::AdamW(FsdpModel& model, const AdamWConfig& config, MemoryTracker& tracker) : config_(config) {
  for (int u = 0; u < model.num_units(); ++u) {
    const size_t n = model.unit(u).master_shard().size();
    exp_avg_.emplace_back(tracker, MemoryCategory::kOptimizerState, n);
    exp_avg_sq_.emplace_back(tracker, MemoryCategory::kOptimizerState, n);
  }
}

std::vector<std::span<float>> AdamW::state(int unit) {
  auto& m = exp_avg_.at(static_cast<size_t>(unit));
  auto& v = exp_avg_sq_.at(static_cast<size_t>(unit));
  return {{m.data(), m.size()}, {v.data(), v.size()}};
}

// torch.optim.AdamW: decoupled weight decay, bias-corrected moments, eps outside the square root.
void AdamW::update_shard(std::span<float> param, std::span<const float> grad, std::span<const std::span<float>> state,
                         int64_t step, double lr) const {
  check_shapes("AdamW", param, grad, state, 2);
  float* m = state[0].data();
  float* v = state[1].data();
  const auto b1 = static_cast<float>(config_.beta1);
  const auto b2 = static_cast<float>(config_.beta2);
  const double t = static_cast<double>(step);
  const auto step_size = static_cast<float>(lr / (1 - std::pow(config_.beta1, t)));
  const auto bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(config_.beta2, t)));
  const auto decay = static_cast<float>(1 - lr * config_.weight_decay);
  const auto eps = static_cast<float>(config_.eps);
  for (size_t i = 0; i < param.size(); ++i) {
    const float g = grad[i];
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    param[i] = param[i] * decay - step_size * m[i] / (std::sqrt(v[i]) / bias2_sqrt + eps);
  }
}

SgdMomentum::SgdMomentum(FsdpModel& model, const SgdConfig& config, MemoryTracker& tracker) : config_(config) {
  for (int u = 0; u < model.num_units(); ++u) {
    momentum_.emplace_back(tracker, MemoryCategory::kOptimizerState, model.unit(u).master_shard().size());
  }
}

std::vector<std::span<float>> SgdMomentum::state(int unit) {
  auto& b = momentum_.at(static_cast<size_t>(unit));
  return {{b.data(), b.size()}};
}

// torch.optim.SGD with momentum, no dampening: weight decay joins the gradient; the first step's
// buffer is the gradient itself (a zero buffer gives the same).
void SgdMomentum::update_shard(std::span<float> param, std::span<const float> grad,
                               std::span<const std::span<float>> state, int64_t /*step*/, double lr) const {
  check_shapes("SgdMomentum", param, grad, state, 1);
  float* buf = state[0].data();
  const auto mu = static_cast<float>(config_.momentum);
  const auto wd = static_cast<float>(config_.weight_decay);
  const auto rate = static_cast<float>(lr);
  for (size_t i = 0; i < param.size(); ++i) {
    const float g = grad[i] + wd * param[i];
    buf[i] = mu * buf[i] + g;
    param[i] -= rate * buf[i];
  }
}

}  // namespace fsdp::runtime
