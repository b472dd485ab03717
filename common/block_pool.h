// A free list of equal-size blocks, and the standard allocator over it. For objects that a hot path
// creates and drops on every call (a collective's requests, the shared_ptr control blocks of its
// operation, the nodes of a transport's matching lists): once the first calls have made their
// high-water count, the next calls take blocks from the list and make no heap call.
//
// Thread-safe (a block may be freed on another thread than the one that took it: an operation's
// requests are dropped wherever its last Work goes). A pool keeps a few block sizes (a std::deque's
// nodes and its map); the first sizes asked for are kept, requests of further sizes go to the heap.
#pragma once

#include <cstddef>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace fsdp {

class BlockPool {
 public:
  // At most `max_idle` free blocks of each size are kept; more go back to the heap.
  explicit BlockPool(size_t max_idle = 256) : max_idle_(max_idle) {}
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  void* allocate(size_t bytes);
  void deallocate(void* p, size_t bytes) noexcept;

  // Blocks taken from the heap so far (the first calls' high water, or a size the pool does not hold).
  size_t heap_allocations() const;

 private:
  static constexpr size_t kSizes = 4;
  struct SizeClass {
    size_t bytes = 0;  // 0: not yet used
    std::vector<void*> idle;
  };
  // The class for `bytes`, claiming an unused one; null when all are taken by other sizes.
  SizeClass* size_class(size_t bytes);

  mutable std::mutex mu_;
  size_t max_idle_;
  size_t heap_allocations_ = 0;
  SizeClass classes_[kSizes];
};

// std::allocator's interface over a shared BlockPool; copies (and rebinds) share it, and the pool
// lives as long as any copy (std::allocate_shared keeps one in the control block it frees).
template <class T>
class PoolAllocator {
 public:
  using value_type = T;

  explicit PoolAllocator(std::shared_ptr<BlockPool> pool) : pool_(std::move(pool)) {}
  template <class U>
  PoolAllocator(const PoolAllocator<U>& other) noexcept : pool_(other.pool()) {}

  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "BlockPool hands out operator new's alignment");
    return static_cast<T*>(pool_->allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { pool_->deallocate(p, n * sizeof(T)); }

  const std::shared_ptr<BlockPool>& pool() const { return pool_; }
  template <class U>
  bool operator==(const PoolAllocator<U>& other) const noexcept { return pool_ == other.pool(); }

 private:
  std::shared_ptr<BlockPool> pool_;
};

// A list whose nodes come from a pool of its own: `PooledList<T> items{pooled<T>()}`.
template <class T>
using PooledList = std::list<T, PoolAllocator<T>>;
// Likewise a deque (its nodes and its map): `PooledDeque<T> items{pooled<T>()}`.
template <class T>
using PooledDeque = std::deque<T, PoolAllocator<T>>;
template <class T>
PoolAllocator<T> pooled() {
  return PoolAllocator<T>(std::make_shared<BlockPool>());
}

}  // namespace fsdp
