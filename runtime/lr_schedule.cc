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
  const int64_t total = std::max<int64_t>(total_steps, 0);
  const int64_t warmup = std::clamp<int64_t>(warmup_steps, 0, total);
  const int64_t decay_span = decay_steps < 0 ? total - warmup : std::min(decay_steps, total - warmup);
  if (step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  const int64_t decay_start = total + 1 - decay_span;  // the last step at full lr
  if (step <= decay_start || decay_span == 0) return lr;
  // Past total_steps (training.steps > lr_scheduler.total_steps) the minimum holds, where TorchTitan's
  // formula would run on past it.
  const double progress = std::min(1.0, static_cast<double>(step - decay_start) / static_cast<double>(decay_span));
  double factor = 1;
  switch (decay) {
    case DecayType::kLinear: factor = 1 - progress; break;
    case DecayType::kCosine: factor = 0.5 * (1 + std::cos(std::numbers::pi * progress)); break;
    case DecayType::kSqrt: factor = 1 - std::sqrt(progress); break;
  }
  return lr * (min_lr_factor + (1 - min_lr_factor) * factor);
}

}  // namespace fsdp::runtime
