// The reduction kernel of the windowed algorithms: one block reduced from every rank's input at once,
// in cache-sized chunks, so each input is read once from memory and the output written once.
#pragma once

#include <cstddef>
#include <span>

#include "collectives/algorithms/reduction_plan.h"

namespace fsdp {

// dst[i] = (op over p in rank order of srcs[p][i]) for `count` user elements, accumulated in the
// plan's type (premul applied to each input, avg's division and the narrowing applied once). dst may
// alias one of srcs exactly; `scratch` holds 2 * kWindowReduceChunk accumulate-type elements.
// `output_read_soon`: peers read dst next (all-reduce), so it stays in cache; otherwise (reduce-scatter)
// a large two-input f32 sum streams it past the cache (FSDP_STREAM_COPY_BYTES).
inline constexpr size_t kWindowReduceChunk = 4096;
void reduce_from_windows(std::byte* dst, std::span<const std::byte* const> srcs, size_t count,
                         const ReductionPlan& plan, std::byte* scratch, bool output_read_soon);

}  // namespace fsdp
