#include "common/block_pool.h"

#include <utility>

namespace fsdp {

BlockPool::~BlockPool() {
  for (SizeClass& c : classes_) {
    for (Free* list : {c.local, c.remote.take_all()}) {
      while (list) ::operator delete(std::exchange(list, list->next));
    }
  }
}

BlockPool::SizeClass* BlockPool::find(size_t bytes) {
  for (SizeClass& c : classes_) {
    const size_t b = c.bytes.load(std::memory_order_acquire);
    if (b == bytes) return &c;
    if (b == 0) return nullptr;  // classes are claimed in order
  }
  return nullptr;
}

BlockPool::SizeClass* BlockPool::claim(size_t bytes) {
  for (SizeClass& c : classes_) {
    const size_t b = c.bytes.load(std::memory_order_relaxed);  // only this thread claims
    if (b == bytes) return &c;
    if (b == 0) {
      c.bytes.store(bytes, std::memory_order_release);
      return &c;
    }
  }
  return nullptr;
}

void* BlockPool::allocate(size_t bytes) {
  if (bytes >= sizeof(Free)) {
    if (SizeClass* c = claim(bytes)) {
      if (!c->local && sharing_ == Sharing::kFreedAnywhere) {
        c->local = c->remote.take_all();  // every block freed since
      }
      if (Free* block = c->local) {
        c->local = block->next;
        return block;
      }
    }
  }
  heap_allocations_.fetch_add(1, std::memory_order_relaxed);
  return ::operator new(bytes);
}

void BlockPool::deallocate(void* p, size_t bytes) noexcept {
  SizeClass* c = bytes >= sizeof(Free) ? find(bytes) : nullptr;
  if (!c) {
    ::operator delete(p);
    return;
  }
  Free* block = static_cast<Free*>(p);
  if (sharing_ == Sharing::kConfined) {
    block->next = c->local;
    c->local = block;
    return;
  }
  c->remote.push(block);
}

}  // namespace fsdp
