#include "runtime/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace fsdp::runtime {

DecayType parse_decay_type(std::string_view s) {
  if (s == "linear") return DecayType::kLinear;
  if (s == "cosine") return DecayType::kCosine;
  if (s == "sqrt") return DecayType::kSqrt;
  throw std::invalid_argument("unknown lr decay type '" + std::string(s) + "' (expected linear, cosine or sqrt)");
}

double LrSchedule::at(int64_t step) const {
  const int64_t warmup = std::max<int64_t>(warmup_steps, 0);
  if (step <= warmup) {
    // Ramp so the first step already moves: step / (warmup + 1), reaching lr after warm-up.
    return lr * static_cast<double>(step) / static_cast<double>(warmup + 1);
  }
  const int64_t after = std::max<int64_t>(total_steps - warmup, 1);
  const int64_t decay_steps =
      decay_ratio < 0 ? after : std::clamp<int64_t>(static_cast<int64_t>(std::llround(decay_ratio * after)), 0, after);
  const int64_t decay_start = total_steps - decay_steps;  // last step before the decay begins
  if (step <= decay_start || decay_steps == 0) return lr;
  // Over decay_steps + 1 so the last step still learns (as TorchTitan); it ends one step short of the minimum.
  const double progress = std::min(1.0, static_cast<double>(step - decay_start) / static_cast<double>(decay_steps + 1));
  double factor = 1;
  switch (decay) {
    case DecayType::kLinear: factor = 1 - progress; break;
    case DecayType::kCosine: factor = 0.5 * (1 + std::cos(std::numbers::pi * progress)); break;
    case DecayType::kSqrt: factor = 1 - std::sqrt(progress); break;
  }
  return lr * (min_lr_factor + (1 - min_lr_factor) * factor);
}

}  // namespace fsdp::runtime
