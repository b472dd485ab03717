// Learning rate per step, TorchTitan style: linear warm-up, an optional flat stretch, then linear,
// cosine or sqrt decay towards lr * min_lr_factor over the last decay_ratio of the post-warm-up steps
// (the last step stays one decay step above the minimum, so it still learns).
#pragma once

#include <cstdint>
#include <string_view>

namespace fsdp::runtime {

enum class DecayType { kLinear, kCosine, kSqrt };
DecayType parse_decay_type(std::string_view s);  // "linear", "cosine", "sqrt"; throws std::invalid_argument

struct LrSchedule {
  double lr = 8e-4;
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;
  double decay_ratio = -1;  // fraction of steps that decay; < 0: every step after warm-up
  DecayType decay = DecayType::kLinear;
  double min_lr_factor = 0;

  // Learning rate for step `step` (1-based, as the training loop counts).
  double at(int64_t step) const;
};

}  // namespace fsdp::runtime
