#include "collectives/algorithms/window_reduce.h"

#include <algorithm>
#include <cstring>

#include "collectives/kernels/stream_copy.h"

namespace fsdp {

void reduce_from_windows(std::byte* dst, std::span<const std::byte* const> srcs, size_t count,
                         const ReductionPlan& plan, std::byte* scratch, bool output_read_soon) {
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
  // Native types (f32, f64, the integers) without a premultiply, any reduction: reduce straight into dst, the first
  // two inputs in one pass, instead of through the accumulator and two copies. Same operations in the
  // same order, so the same bits. Not when dst is one of the later inputs (in place, rank >= 2): the
  // first pass would overwrite it before it is read.
  const auto aliased = std::find(srcs.begin(), srcs.end(), dst);
  if (!output_read_soon && srcs.size() == 2 && aliased == srcs.end() && !converts && !plan.average && acc_type == DataType::kFloat32 &&
      plan.red.kind == ReduceKind::kSum && worth_streaming(count * acc_elem)) {
    // Two ranks, out of place, large: the output is written once and read by nobody soon, so it
    // streams past the cache instead of being read for ownership first.
    stream_sum_f32(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(srcs[0]),
                   reinterpret_cast<const float*>(srcs[1]), count);
    return;
  }
  if (!converts && srcs.size() >= 2 && (aliased == srcs.end() || aliased - srcs.begin() < 2)) {
    for (size_t i = 0; i < count; i += kWindowReduceChunk) {
      const size_t len = std::min(kWindowReduceChunk, count - i);
      const size_t at = i * user_elem;
      reduce_pair(dst + at, srcs[0] + at, srcs[1] + at, len, acc_type, plan.red.kind);
      for (size_t p = 2; p < srcs.size(); ++p) reduce_into(dst + at, srcs[p] + at, len, acc_type, plan.red.kind);
      if (plan.average) divide_in_place(dst + at, len, acc_type, static_cast<int>(srcs.size()));
    }
    return;
  }
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
