// Learning rate per step, TorchTitan's schedule (components/lr_scheduler.py, v0.2.x,
// linear_warmup_stable_decay): linear warm-up, a flat stretch, then linear, cosine or sqrt decay
// towards lr * min_lr_factor. With W warm-up steps, D decay steps and T total steps, the 1-based
// training step s runs at lr times
//   s <= W:          s / W
//   s <= T + 1 - D:  1
//   else:            min + (1 - min) * f(p),  p = (s - (T + 1 - D)) / D,  f = 1 - p | (1 + cos(pi p)) / 2 | 1 - sqrt(p)
// (TorchTitan's LambdaLR gives step s the factor of its 0-based step s - 1; the decay spans a virtual
// step T + 1, so the last step still learns). Steps past T hold the minimum.
#pragma once

#include <cstdint>
#include <string_view>

namespace fsdp::runtime {

enum class DecayType { kLinear, kCosine, kSqrt };
DecayType parse_decay_type(std::string_view s);  // "linear", "cosine", "sqrt"; throws std::invalid_argument

struct LrSchedule {
  double lr = 8e-4;
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;  // cut to total_steps, as TorchTitan
  int64_t decay_steps = -1;  // -1: every step after warm-up; cut to what warm-up leaves, as TorchTitan
  DecayType decay = DecayType::kLinear;
  double min_lr_factor = 0;

  // Learning rate for step `step` (1-based, as the training loop counts).
  double at(int64_t step) const;
};

}  // namespace fsdp::runtime
