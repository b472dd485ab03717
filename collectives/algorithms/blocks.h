// How a buffer of `count` elements splits into one block per rank, and a block into pipelining
// chunks. Blocks differ by at most one element (the first count % parts get the extra one), so an
// all-reduce of any count runs on a ring.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <vector>

namespace fsdp {

struct Blocks {
  size_t count = 0;  // elements in the whole buffer
  int parts = 1;
  size_t elem = 1;  // bytes per element

  size_t count_of(int b) const { return count / parts + (static_cast<size_t>(b) < count % parts ? 1 : 0); }
  size_t offset(int b) const {  // bytes
    return (count / parts * b + std::min<size_t>(b, count % parts)) * elem;
  }
  size_t bytes(int b) const { return count_of(b) * elem; }
  size_t max_bytes() const { return count_of(0) * elem; }
  size_t total_bytes() const { return count * elem; }
};

// Where each rank's block lies in an all-to-all buffer (blocks may differ per rank, all_to_all_v):
// byte offset and length, indexed by rank. (std::pmr: an all-to-all of equal blocks builds them in its
// operation's arena; moving them keeps it, copying takes the heap.)
struct PeerBlocks {
  std::pmr::vector<size_t> offset;
  std::pmr::vector<size_t> bytes;

  static PeerBlocks equal(int n, size_t block_bytes, std::pmr::memory_resource* memory = std::pmr::get_default_resource()) {
    PeerBlocks b{std::pmr::vector<size_t>(n, memory), std::pmr::vector<size_t>(n, block_bytes, memory)};
    for (int r = 0; r < n; ++r) b.offset[r] = r * block_bytes;
    return b;
  }
};

// Chunk c of a block covers bytes [c * size, min((c + 1) * size, block bytes)), so chunk c of any
// two blocks of one Blocks occupies the same range of a block-sized buffer.
struct Chunking {
  size_t size = 1;

  // Chunks are whole cache lines of whole elements, and few enough to number in a 16-bit slot field.
  Chunking(size_t requested, size_t max_block_bytes, size_t elem) {
    size_t unit = 64 * elem;
    size_t at_least = max_block_bytes / 0xFFFF + 1;
    size = std::max(requested, at_least);
    size = (size + unit - 1) / unit * unit;
  }
  size_t count(size_t block_bytes) const { return (block_bytes + size - 1) / size; }
  size_t length(size_t block_bytes, size_t c) const { return std::min(size, block_bytes - c * size); }
};

// The tag slot of transfer `chunk` at algorithm step `step` (12 bits of step, 16 of chunk; the top
// 4 bits are the Op's phase, set when one algorithm runs another).
inline uint32_t slot(int step, size_t chunk) {
  return (static_cast<uint32_t>(step) << 16) | static_cast<uint32_t>(chunk);
}

// memcpy that accepts null pointers with a zero size (count-0 collectives pass them).
inline void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

inline bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace fsdp
