// A free list of equal-size blocks, and the standard allocator over it. For objects that a hot path
// creates and drops on every call (a collective's requests, the shared_ptr control blocks of its
// operation, the nodes of a transport's matching lists): once the first calls have made their
// high-water count, the next calls take blocks from the list and make no heap call.
//
// Cheaper than the C library's per-thread caches, not just fewer calls: a confined pool (every use
// under one lock or on one thread, as a transport's lists are) takes no atomic operation at all; a
// pool whose blocks may be freed on any thread (a request is dropped wherever its operation's last
// Work goes) takes one compare-and-swap per free and one exchange per batch of allocations:
// allocations, one thread at a time, pop a private list and refill it by taking every block freed
// since at once (no ABA: nobody else pops). A pool keeps a few block sizes (a std::deque's nodes and
// its map); requests of further sizes go to the heap. Blocks stay until the pool goes.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <list>
#include <memory>
#include <new>

namespace fsdp {

// The shared half of that scheme, for any node with a `next` link: any thread pushes a node (one
// compare-and-swap, release); one thread at a time takes every node pushed so far (one exchange,
// acquire). No ABA: nobody pops single nodes. BlockPool's freed blocks and OpPool's returned Ops.
template <class Node, Node* Node::*kNext>
class ReturnedList {
 public:
  void push(Node* node) noexcept {
    node->*kNext = head_.load(std::memory_order_relaxed);
    while (!head_.compare_exchange_weak(node->*kNext, node, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }
  Node* take_all() noexcept { return head_.exchange(nullptr, std::memory_order_acquire); }

 private:
  std::atomic<Node*> head_{nullptr};
};

class BlockPool {
 public:
  enum class Sharing {
    kConfined,       // allocate and deallocate one thread at a time (a lock or one thread orders them)
    kFreedAnywhere,  // allocate one thread at a time; deallocate from any thread, concurrently
  };

  explicit BlockPool(Sharing sharing) : sharing_(sharing) {}
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  void* allocate(size_t bytes);
  void deallocate(void* p, size_t bytes) noexcept;

  // Blocks taken from the heap so far (the first calls' high water, or a size the pool does not keep).
  size_t heap_allocations() const { return heap_allocations_.load(std::memory_order_relaxed); }

 private:
  struct Free {
    Free* next;
  };
  struct SizeClass {
    std::atomic<size_t> bytes{0};        // 0: not yet claimed (allocate claims, release)
    Free* local = nullptr;                      // the allocating thread's
    ReturnedList<Free, &Free::next> remote;  // freed by other threads (kFreedAnywhere)
  };
  static constexpr size_t kSizes = 4;
  SizeClass* find(size_t bytes);
  SizeClass* claim(size_t bytes);  // find, or take an unused class (allocating thread only)

  const Sharing sharing_;
  std::atomic<size_t> heap_allocations_{0};
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

// Containers whose nodes come from a confined pool of their own, for lists a lock (or one thread)
// already guards: `PooledList<T> items{pooled<T>()}`, `PooledDeque<T> queue{pooled<T>()}`.
template <class T>
using PooledList = std::list<T, PoolAllocator<T>>;
template <class T>
using PooledDeque = std::deque<T, PoolAllocator<T>>;
template <class T>
PoolAllocator<T> pooled() {
  return PoolAllocator<T>(std::make_shared<BlockPool>(BlockPool::Sharing::kConfined));
}

}  // namespace fsdp
