// A caching allocator for the blocks behind TrackedBuffers, one per MemoryTracker (one per rank), as
// torch's caching allocator is one per device. A training step allocates the same buffers in the same
// sizes every step (unit all-gather outputs, unsharded parameters and gradients, reduce-scatter
// inputs, activations and scratch); handed back to the C library they were unmapped and mapped again
// on every unit (7,000-11,000 minor page faults per step on the debug model). Here a released block
// waits in a free list of its size and the next request of that size takes it, so once the first
// steps have reserved each size's high-water count, a step maps nothing and frees nothing.
//
// "reserved" bytes are held from the system (handed out + cached); "allocated" bytes are what the
// tracker counts by category. FSDP_CACHING_ALLOCATOR=0 hands every block straight back (the old way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace fsdp {

struct BlockCacheStats {
  int64_t reserved_bytes = 0;       // held from the system: handed out + cached
  int64_t peak_reserved_bytes = 0;  // high-water mark of reserved_bytes
  int64_t cached_bytes = 0;         // free blocks waiting for a request of their size
  int64_t system_allocations = 0;   // requests the cache could not meet (each a fresh block)
  int64_t system_frees = 0;         // blocks handed back to the system
};

class BlockCache {
 public:
  BlockCache();  // caching unless FSDP_CACHING_ALLOCATOR=0
  explicit BlockCache(bool caching) : caching_(caching) {}
  ~BlockCache();  // hands every cached block back; blocks still out are the owners' to release first
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // 64-byte aligned, at least `bytes` long, contents undefined. Throws std::bad_alloc.
  void* allocate(size_t bytes);
  // `bytes` as given to allocate().
  void release(void* p, size_t bytes);
  // Hands the cached blocks back to the system (reserved drops to what is handed out).
  void empty();

  BlockCacheStats stats() const;
  bool caching() const { return caching_; }

 private:
  void free_block(void* p, size_t rounded);  // to the system, counted; mu_ held

  const bool caching_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> cached blocks of that size
  BlockCacheStats stats_;
};

}  // namespace fsdp
