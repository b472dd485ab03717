// The memory an operation's coroutines live in. An Op is reused from call to call (OpPool), and its
// arena with it: the frames of the algorithm's coroutines (Task) and the small lists they build
// (std::pmr containers) are carved from one buffer, popped when freed last-in first-out as nested
// coroutines end, and all dropped when the operation is recycled. A call that needs more than the
// buffer holds takes the rest from the heap once; the recycled arena then grows to that high water,
// so the next call of that shape allocates nothing.
//
// One thread at a time: the caller builds the top coroutine, then the engine (or a caller driving
// it) resumes it; submission (the engine's inbox lock) and recycling (the OpPtr's count, then the
// pool's compare-and-swap) hand the Op over with the ordering that needs.
#pragma once

#include <cstddef>
#include <memory>
#include <memory_resource>

namespace fsdp {

class OpArena final : public std::pmr::memory_resource {
 public:
  OpArena() = default;
  OpArena(const OpArena&) = delete;
  OpArena& operator=(const OpArena&) = delete;

  // Coroutine frames: `arena` null takes the heap. A header before the frame names its arena, since a
  // frame's operator delete is static.
  static void* allocate_frame(OpArena* arena, size_t bytes);
  static void free_frame(void* frame, size_t bytes) noexcept;

  // Everything carved from the arena is gone; the buffer grows to this use's high water (the peak of
  // what was live at once, buffer and heap overflow together).
  void reset() noexcept;
  // Allocations that went to the heap because the buffer was full (tests check steady state).
  size_t heap_allocations() const { return heap_allocations_; }
  size_t capacity() const { return capacity_; }

 private:
  void* do_allocate(size_t bytes, size_t alignment) override;
  void do_deallocate(void* p, size_t bytes, size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
  bool owns(const void* p) const { return p >= buffer_.get() && p < buffer_.get() + capacity_; }

  std::unique_ptr<std::byte[]> buffer_;
  size_t capacity_ = 0;
  size_t top_ = 0;          // bytes in use from the buffer's start
  size_t high_water_ = 0;   // since the last reset, counting what overflowed to the heap
  size_t overflowed_ = 0;   // heap bytes taken since the last reset
  size_t heap_allocations_ = 0;
};

}  // namespace fsdp
