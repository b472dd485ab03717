#include "bench/fsdp_bench/peer_reduce.h"

#include <algorithm>

#include "collectives/kernels/reduce_kernels.h"

namespace fsdp::bench {

void reduce_elements(void* x, const void* y, size_t n, DataType t, ReduceKind kind) {
  if (!needs_promotion(t)) {
    reduce_into(x, y, n, t, kind);
    return;
  }
  // Widen a slice of both, combine in f32, round back.
  constexpr size_t kSlice = 1024;
  float wx[kSlice], wy[kSlice];
  const size_t elem = element_size(t);
  for (size_t done = 0; done < n; done += kSlice) {
    const size_t len = std::min(kSlice, n - done);
    auto* px = static_cast<std::byte*>(x) + done * elem;
    widen_to_f32(wx, px, len, t, 1.0);
    widen_to_f32(wy, static_cast<const std::byte*>(y) + done * elem, len, t, 1.0);
    reduce_into(wx, wy, len, DataType::kFloat32, kind);
    narrow_from_f32(px, wx, len, t);
  }
}

void divide_elements(void* x, size_t n, DataType t, int divisor) {
  if (!needs_promotion(t)) {
    divide_in_place(x, n, t, divisor);
    return;
  }
  constexpr size_t kSlice = 1024;
  float w[kSlice];
  const size_t elem = element_size(t);
  for (size_t done = 0; done < n; done += kSlice) {
    const size_t len = std::min(kSlice, n - done);
    auto* p = static_cast<std::byte*>(x) + done * elem;
    widen_to_f32(w, p, len, t, 1.0);
    divide_in_place(w, len, DataType::kFloat32, divisor);
    narrow_from_f32(p, w, len, t);
  }
}

}  // namespace fsdp::bench
