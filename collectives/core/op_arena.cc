#include "collectives/core/op_arena.h"

#include <algorithm>
#include <bit>
#include <new>

namespace fsdp {
namespace {

constexpr size_t kAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;  // what operator new promises a frame
constexpr size_t kHeader = kAlign;                          // holds the frame's OpArena*
constexpr size_t kFirstBytes = 4096;                        // a small collective's frames fit

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

void* OpArena::allocate_frame(OpArena* arena, size_t bytes) {
  void* base = arena ? arena->allocate(bytes + kHeader, kAlign) : ::operator new(bytes + kHeader);
  *static_cast<OpArena**>(base) = arena;
  return static_cast<std::byte*>(base) + kHeader;
}

void OpArena::free_frame(void* frame, size_t bytes) noexcept {
  void* base = static_cast<std::byte*>(frame) - kHeader;
  if (OpArena* arena = *static_cast<OpArena**>(base)) {
    arena->deallocate(base, bytes + kHeader, kAlign);
  } else {
    ::operator delete(base);
  }
}

void* OpArena::do_allocate(size_t bytes, size_t alignment) {
  bytes = std::max<size_t>(bytes, 1);  // a distinct address inside the buffer, never its end
  const size_t a = std::max(alignment, kAlign);
  if (!buffer_) {
    capacity_ = kFirstBytes;
    buffer_ = std::make_unique_for_overwrite<std::byte[]>(capacity_);
  }
  const size_t start = round_up(top_, a);
  if (a <= kAlign && start + bytes <= capacity_) {
    top_ = start + round_up(bytes, kAlign);
    high_water_ = std::max(high_water_, top_ + overflowed_);
    return buffer_.get() + start;
  }
  overflowed_ += round_up(bytes, kAlign);
  high_water_ = std::max(high_water_, top_ + overflowed_);
  ++heap_allocations_;
  return a > kAlign ? ::operator new(bytes, std::align_val_t(a)) : ::operator new(bytes);
}

void OpArena::do_deallocate(void* p, size_t bytes, size_t alignment) {
  bytes = std::max<size_t>(bytes, 1);
  if (!owns(p)) {
    overflowed_ -= std::min(overflowed_, round_up(bytes, kAlign));  // live overflow: the high water counts the peak
    if (alignment > kAlign) {
      ::operator delete(p, std::align_val_t(alignment));
    } else {
      ::operator delete(p);
    }
    return;
  }
  // The last block carved goes back at once (a nested coroutine that ended); others wait for reset.
  const size_t start = static_cast<size_t>(static_cast<std::byte*>(p) - buffer_.get());
  if (start + round_up(bytes, kAlign) == top_) top_ = start;
}

void OpArena::reset() noexcept {
  top_ = 0;
  if (high_water_ > capacity_) {
    // Runs inside the OpPtr's deleter: out of memory keeps the old buffer (the next use overflows again).
    const size_t grown = std::bit_ceil(high_water_);
    try {
      buffer_ = std::make_unique_for_overwrite<std::byte[]>(grown);  // replaced only once it succeeded
      capacity_ = grown;
    } catch (const std::bad_alloc&) {
    }
  }
  high_water_ = 0;
  overflowed_ = 0;
}

}  // namespace fsdp
