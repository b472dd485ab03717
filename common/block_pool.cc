#include "common/block_pool.h"

namespace fsdp {

BlockPool::~BlockPool() {
  for (SizeClass& c : classes_) {
    for (void* p : c.idle) ::operator delete(p);
  }
}

BlockPool::SizeClass* BlockPool::size_class(size_t bytes) {
  for (SizeClass& c : classes_) {
    if (c.bytes == bytes) return &c;
    if (c.bytes == 0) {
      c.bytes = bytes;
      return &c;
    }
  }
  return nullptr;
}

void* BlockPool::allocate(size_t bytes) {
  {
    std::lock_guard lock(mu_);
    SizeClass* c = size_class(bytes);
    if (c && !c->idle.empty()) {
      void* p = c->idle.back();
      c->idle.pop_back();
      return p;
    }
    ++heap_allocations_;
  }
  return ::operator new(bytes);
}

void BlockPool::deallocate(void* p, size_t bytes) noexcept {
  {
    std::lock_guard lock(mu_);
    SizeClass* c = size_class(bytes);
    if (c && c->idle.size() < max_idle_) {
      // The list's own growth is bounded by max_idle_ and happens while the high water is made.
      try {
        c->idle.push_back(p);
        return;
      } catch (...) {
      }
    }
  }
  ::operator delete(p);
}

size_t BlockPool::heap_allocations() const {
  std::lock_guard lock(mu_);
  return heap_allocations_;
}

}  // namespace fsdp
