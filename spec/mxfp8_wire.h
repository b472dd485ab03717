// How many bytes MXFP8 takes on the wire (OCP Microscaling v1.0): one byte per element and one E8M0
// scale per block of 32, the codes first, then the scales. The one home of the formula: the planner
// prices it (sharding/), the codec lays it out (collectives/kernels/mxfp8.h).
#pragma once

#include <cstddef>

namespace fsdp::spec {

inline constexpr size_t kMxfp8BlockSize = 32;
// 8.25 bits per element: what a byte of payload costs with its share of the scales.
inline constexpr double kMxfp8BytesPerElement = 33.0 / 32.0;

// Scales of n elements: ceil(n / 32). N is any integer type (the codec's size_t, the planner's int64_t).
template <class N>
constexpr N mxfp8_block_count(N n) {
  return (n + static_cast<N>(kMxfp8BlockSize) - 1) / static_cast<N>(kMxfp8BlockSize);
}
// Bytes of one wire slot of n elements: the codes, then the scales.
template <class N>
constexpr N mxfp8_wire_bytes(N n) {
  return n + mxfp8_block_count(n);
}

}  // namespace fsdp::spec
