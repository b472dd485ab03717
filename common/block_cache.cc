#include "common/block_cache.h"

#include <cstdlib>
#include <new>

#include "common/knobs.h"

#if defined(__SANITIZE_ADDRESS__)
#define FSDP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FSDP_ASAN 1
#endif
#endif
#ifdef FSDP_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace fsdp {
namespace {

constexpr size_t kAlign = 64;

size_t rounded(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// A cached block is poisoned under AddressSanitizer, so a use after release is still reported.
void poison(void* p, size_t bytes) {
#ifdef FSDP_ASAN
  ASAN_POISON_MEMORY_REGION(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}
void unpoison(void* p, size_t bytes) {
#ifdef FSDP_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace

BlockCache::BlockCache() : caching_(knobs::kCachingAllocator.get()) {}

BlockCache::~BlockCache() { empty(); }

void* BlockCache::allocate(size_t bytes) {
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= static_cast<int64_t>(size);
    unpoison(p, size);
    return p;
  }
  void* p = std::aligned_alloc(kAlign, size);
  if (p == nullptr) throw std::bad_alloc();
  ++stats_.system_allocations;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  if (stats_.reserved_bytes > stats_.peak_reserved_bytes) stats_.peak_reserved_bytes = stats_.reserved_bytes;
  return p;
}

void BlockCache::release(void* p, size_t bytes) {
  if (p == nullptr) return;
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!caching_) {
    free_block(p, size);
    return;
  }
  poison(p, size);
  free_[size].push_back(p);
  stats_.cached_bytes += static_cast<int64_t>(size);
}

void BlockCache::empty() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      unpoison(p, size);
      free_block(p, size);
      stats_.cached_bytes -= static_cast<int64_t>(size);
    }
  }
  free_.clear();
}

void BlockCache::free_block(void* p, size_t size) {
  std::free(p);
  ++stats_.system_frees;
  stats_.reserved_bytes -= static_cast<int64_t>(size);
}

BlockCacheStats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace fsdp
