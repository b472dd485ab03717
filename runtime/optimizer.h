// Optimizers over the rank's fp32 master shards: each rank updates only the elements it owns, with
// state (moments, momentum) of the same sharded size. Padding elements have zero gradients and stay zero.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/memory_tracker.h"

namespace fsdp::runtime {

class FsdpModel;

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct SgdConfig {
  double momentum = 0.9;
  double weight_decay = 0;
};

class ShardedOptimizer {
 public:
  virtual ~ShardedOptimizer() = default;
  // One update of every unit's master shard from its grad shard at learning rate lr, units in
  // forward order; after_unit(u), when given, runs as soon as unit u is updated (the trainer starts the
  // next step's first all-gathers there, so they overlap the remaining updates).
  void step(FsdpModel& model, double lr, const std::function<void(int unit)>& after_unit = {});
  int64_t steps_taken() const { return step_; }

  // The state buffers of unit u (for checkpoints): AdamW exp_avg then exp_avg_sq; SGD momentum.
  virtual std::vector<std::span<float>> state(int unit) = 0;
  void set_steps_taken(int64_t steps) { step_ = steps; }

  // State buffers per unit: AdamW 2, SGD 1 (what state(u) returns, in that order).
  virtual int state_count() const = 0;
  // The update arithmetic on any shard with its state (state_count() buffers of param.size()): step()
  // runs it on the rank's own shards, a buddy mirror (runtime/buddy_mirror.h) on its copy of a peer's,
  // so equal inputs give bitwise equal outputs. `step` is the 1-based count the bias correction uses
  // (steps_taken() during step()).
  virtual void update_shard(std::span<float> param, std::span<const float> grad,
                            std::span<const std::span<float>> state, int64_t step, double lr) const = 0;

 protected:
  int64_t step_ = 0;
};

class AdamW final : public ShardedOptimizer {
 public:
  AdamW(FsdpModel& model, const AdamWConfig& config, MemoryTracker& tracker);
  std::vector<std::span<float>> state(int unit) override;
  int state_count() const override { return 2; }
  void update_shard(std::span<float> param, std::span<const float> grad, std::span<const std::span<float>> state,
                    int64_t step, double lr) const override;

 private:
  AdamWConfig config_;
  std::vector<TrackedBuffer<float>> exp_avg_, exp_avg_sq_;
};

class SgdMomentum final : public ShardedOptimizer {
 public:
  SgdMomentum(FsdpModel& model, const SgdConfig& config, MemoryTracker& tracker);
  std::vector<std::span<float>> state(int unit) override;
  int state_count() const override { return 1; }
  void update_shard(std::span<float> param, std::span<const float> grad, std::span<const std::span<float>> state,
                    int64_t step, double lr) const override;

 private:
  SgdConfig config_;
  std::vector<TrackedBuffer<float>> momentum_;
};

}  // namespace fsdp::runtime
