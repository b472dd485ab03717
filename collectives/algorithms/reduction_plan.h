// How a reduction of a user's type runs: in which type partials travel (16- and 8-bit floats widen
// to f32 and narrow once at the end), and what happens before (premul-sum's scalar) and after (avg's
// division by the number of ranks).
#pragma once

#include <cstddef>

#include "collectives/algorithms/algorithms.h"
#include "collectives/kernels/reduce_kernels.h"

namespace fsdp {

struct ReductionPlan {
  DataType user_type;
  Reduction red;   // what the algorithm runs
  bool promoted;   // 16/8-bit floats widen to f32 and narrow once at the end
  bool premul;     // inputs multiplied by `scalar` first
  double scalar;
  bool average;    // divide by n at the end

  ReductionPlan(DataType t, ReduceOp op)
      : user_type(t),
        red{accumulate_type(t), op.kind == ReduceKind::kAvg || op.kind == ReduceKind::kPremulSum ? ReduceKind::kSum : op.kind},
        promoted(needs_promotion(t)),
        premul(op.kind == ReduceKind::kPremulSum),
        scalar(op.scalar),
        average(op.kind == ReduceKind::kAvg) {}

  // The buffer the algorithm reads: the user's input, or a widened / pre-multiplied copy.
  const std::byte* input(Op& op, const void* in, size_t count) const {
    if (promoted) {
      auto* w = reinterpret_cast<float*>(op.scratch(kScratchWorkIn, count * sizeof(float)));
      widen_to_f32(w, in, count, user_type, premul ? scalar : 1.0);
      return reinterpret_cast<std::byte*>(w);
    }
    if (premul) {
      std::byte* w = op.scratch(kScratchWorkIn, count * red.elem());
      scale_copy(w, in, count, user_type, scalar);
      return w;
    }
    return static_cast<const std::byte*>(in);
  }
  // The buffer the algorithm writes: the user's output, or an f32 one to narrow from.
  std::byte* output(Op& op, void* out, size_t count) const {
    return promoted ? op.scratch(kScratchWorkOut, count * sizeof(float)) : static_cast<std::byte*>(out);
  }
  void finish(std::byte* result, void* out, size_t count, int n) const {
    if (average) divide_in_place(result, count, red.type, n);
    if (promoted) narrow_from_f32(out, reinterpret_cast<const float*>(result), count, user_type);
  }
};

}  // namespace fsdp
