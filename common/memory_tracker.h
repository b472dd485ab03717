// Byte accounting for every buffer the runtime (and the reference model) allocates, so the measured
// peak can be set against the planner's prediction. Categories mirror sharding::MemoryEstimate.
//
//   MemoryTracker tracker;
//   TrackedBuffer<float> shard(tracker, MemoryCategory::kParamShards, n);  // counted while alive
//   tracker.peak_total();                                                  // high-water mark, bytes
//
// Thread-safe: in-process test jobs run several ranks as threads, each with its own tracker, but
// the communicator's progress thread may release buffers too.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

#include "common/block_cache.h"

namespace fsdp {

enum class MemoryCategory {
  kParamShards,     // fp32 master shards
  kGradShards,      // sharded gradients (the reduce-scatter output, accumulated)
  kOptimizerState,  // AdamW moments / SGD momentum
  kAllGather,       // all-gather outputs: unit flat buffers in param dtype, rank-major
  kUnshardedParams, // the model-facing full parameters (copy-out of the all-gather, compute dtype)
  kKeptParams,      // the slice reshard_after_forward=k keeps from forward to backward
  kReduceScatter,   // full-gradient reduce-scatter inputs in reduce dtype
  kUnshardedGrads,  // full gradients backward writes, before the reduce-scatter copy-in
  kActivations,     // tensors the model saves for backward, and its scratch
  kRedundancy,      // a buddy's mirrored shard and optimizer state, and its received grad shard
  kOther,
  kCount
};
std::string_view name(MemoryCategory c);

class MemoryTracker {
 public:
  void allocate(MemoryCategory c, int64_t bytes);
  void release(MemoryCategory c, int64_t bytes);

  int64_t current(MemoryCategory c) const { return slot(c).current.load(std::memory_order_relaxed); }
  int64_t peak(MemoryCategory c) const { return slot(c).peak.load(std::memory_order_relaxed); }
  int64_t current_total() const { return total_.current.load(std::memory_order_relaxed); }
  int64_t peak_total() const { return total_.peak.load(std::memory_order_relaxed); }
  // Starts a new high-water mark from what is live now (e.g. after the first step's warm-up).
  void reset_peaks();

  // Where the tracked buffers' blocks come from and return to. The counts above are allocated bytes
  // (what the planner predicts); cache().stats() reports the reserved bytes held from the system.
  BlockCache& cache() { return cache_; }
  const BlockCache& cache() const { return cache_; }

 private:
  struct Counter {
    std::atomic<int64_t> current{0};
    std::atomic<int64_t> peak{0};
    void add(int64_t bytes);
  };
  const Counter& slot(MemoryCategory c) const { return by_category_[static_cast<size_t>(c)]; }
  std::array<Counter, static_cast<size_t>(MemoryCategory::kCount)> by_category_;
  Counter total_;
  BlockCache cache_;
};

// A 64-byte aligned, zero-initialised array whose bytes count against a tracker while it holds them,
// in a block from the tracker's cache. Move-only; a default-constructed or moved-from buffer holds
// nothing.
template <class T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(MemoryTracker& tracker, MemoryCategory category, size_t count) { reset(tracker, category, count); }
  ~TrackedBuffer() { release(); }
  TrackedBuffer(TrackedBuffer&& o) noexcept { swap(o); }
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;

  // Frees what it holds and allocates `count` zeroed elements.
  void reset(MemoryTracker& tracker, MemoryCategory category, size_t count) {
    reset_for_overwrite(tracker, category, count);
    if (count > 0) std::memset(static_cast<void*>(data_), 0, count * sizeof(T));
  }
  // The same without zeroing: for buffers the caller overwrites whole before reading (all-gather
  // outputs, copy-outs, GEMM outputs with beta 0), where the zeroing of a reused block is wasted.
  void reset_for_overwrite(MemoryTracker& tracker, MemoryCategory category, size_t count) {
    release();
    if (count == 0) return;
    data_ = static_cast<T*>(tracker.cache().allocate(count * sizeof(T)));
    size_ = count;
    tracker_ = &tracker;
    category_ = category;
    tracker_->allocate(category_, bytes());
  }
  // Counts the bytes held under `category` from now on (a buffer whose role changes, e.g. full
  // gradients becoming a reduce-scatter's input).
  void set_category(MemoryCategory category) {
    if (data_ != nullptr) {
      tracker_->release(category_, bytes());
      tracker_->allocate(category, bytes());
    }
    category_ = category;
  }
  void release() {
    if (data_ == nullptr) return;
    tracker_->release(category_, bytes());
    tracker_->cache().release(data_, static_cast<size_t>(bytes()));
    data_ = nullptr;
    size_ = 0;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  int64_t bytes() const { return static_cast<int64_t>(size_ * sizeof(T)); }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  void swap(TrackedBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(tracker_, o.tracker_);
    std::swap(category_, o.category_);
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  MemoryTracker* tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::kOther;
};

}  // namespace fsdp
