#include "collectives/algorithms/window_reduce.h"

#include <algorithm>
#include <cstring>

namespace fsdp {

void reduce_from_windows(std::byte* dst, std::span<const std::byte* const> srcs, size_t count,
                         const ReductionPlan& plan, std::byte* scratch) {
  const DataType user = plan.user_type;
  const DataType acc_type = plan.red.type;
  const size_t user_elem = element_size(user);
  const size_t acc_elem = plan.red.elem();
  const bool converts = plan.promoted || plan.premul;  // inputs need a widened / scaled copy first
  std::byte* acc = scratch;
  std::byte* tmp = scratch + kWindowReduceChunk * acc_elem;
  // An input chunk in the accumulate type: converted into `to`, or read where it lies.
  auto load = [&](std::byte* to, const std::byte* from, size_t len) -> const std::byte* {
    if (plan.promoted) {
      widen_to_f32(reinterpret_cast<float*>(to), from, len, user, plan.premul ? plan.scalar : 1.0);
    } else if (plan.premul) {
      scale_copy(to, from, len, user, plan.scalar);
    } else {
      return from;
    }
    return to;
  };
  for (size_t i = 0; i < count; i += kWindowReduceChunk) {
    const size_t len = std::min(kWindowReduceChunk, count - i);
    const size_t at = i * user_elem;
    const std::byte* first = load(acc, srcs[0] + at, len);
    if (first != acc) std::memcpy(acc, first, len * acc_elem);
    for (size_t p = 1; p < srcs.size(); ++p) {
      reduce_into(acc, converts ? load(tmp, srcs[p] + at, len) : srcs[p] + at, len, acc_type, plan.red.kind);
    }
    if (plan.average) divide_in_place(acc, len, acc_type, static_cast<int>(srcs.size()));
    if (plan.promoted) {
      narrow_from_f32(dst + at, reinterpret_cast<const float*>(acc), len, user);
    } else {
      std::memcpy(dst + at, acc, len * acc_elem);
    }
  }
}

}  // namespace fsdp
