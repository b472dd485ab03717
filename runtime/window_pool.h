// Shared-memory windows (collectives/window.h) of one communicator kept for reuse by size, as the
// block cache keeps tracked buffers. FSDP units take their all-gather outputs and reduce-scatter
// inputs from here when the unit's group is on one host, so those collectives run by loads and stores
// between the ranks' buffers (FSDP2's enable_symm_mem, NCCL's window registration).
//
//   auto pool = WindowPool::create_for(*groups.shard_gather);      // null: windows off or not possible
//   CommBuffer out;
//   out.reset_for_overwrite(pool.get(), tracker, MemoryCategory::kAllGather, bytes);  // window or block
//
// Allocating a window is collective (alloc_window), so a miss must happen on every rank at once: the
// ranks of a group take and return buffers in the same order and sizes (they run the same step), so
// their hits and misses agree. After the first steps every size's high-water count is held and a
// step maps nothing. Held windows count as reserved memory (not in the tracker's categories), as the
// block cache's free blocks do; a taken buffer counts its exact bytes in its category while held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "collectives/communicator.h"
#include "common/memory_tracker.h"

namespace fsdp::runtime {

class WindowPool {
 public:
  // A pool over `comm`, or null where FSDP_UNIT_WINDOWS=0, the group has one rank or spans hosts.
  // The communicator must outlive every window taken.
  static std::shared_ptr<WindowPool> create_for(Communicator& comm);
  explicit WindowPool(Communicator& comm) : comm_(comm) {}

  // A window of at least `bytes` (contents undefined), from the free list of its size or a new one
  // (collective). Null where the ranks turned out unable to share memory: the pool then stays off and
  // every later take returns null on every rank alike, so the caller falls back for good.
  Window* take(size_t bytes);
  void give_back(Window* w);

  bool off() const;
  // Held from the system: windows handed out + cached (bytes).
  int64_t reserved_bytes() const;

 private:
  Communicator& comm_;
  mutable std::mutex mu_;
  bool off_ = false;
  std::vector<std::unique_ptr<Window>> all_;                   // every window allocated, owned here
  std::unordered_map<size_t, std::vector<Window*>> free_;      // bytes -> windows waiting for reuse
};

// A unit's collective buffer: a window from the group's pool where there is one, else a block from
// the tracker's cache. Counts its bytes against the tracker while held either way.
class CommBuffer {
 public:
  CommBuffer() = default;
  ~CommBuffer() { release(); }
  CommBuffer(CommBuffer&&) = delete;
  CommBuffer& operator=(CommBuffer&&) = delete;

  // `bytes` not zeroed (the caller writes them whole), from `pool` when it is non-null and on.
  void reset_for_overwrite(const std::shared_ptr<WindowPool>& pool, MemoryTracker& tracker, MemoryCategory category,
                           size_t bytes);
  // The same, zeroed.
  void reset(const std::shared_ptr<WindowPool>& pool, MemoryTracker& tracker, MemoryCategory category, size_t bytes);
  void release();
  // Counts the bytes held under `category` from now on (TrackedBuffer::set_category).
  void set_category(MemoryCategory category);

  std::byte* data() { return window_ ? window_->data<std::byte>() : block_.data(); }
  int64_t bytes() const { return window_ ? static_cast<int64_t>(bytes_) : block_.bytes(); }
  bool empty() const { return !window_ && block_.empty(); }
  bool windowed() const { return window_ != nullptr; }

 private:
  TrackedBuffer<std::byte> block_;
  std::shared_ptr<WindowPool> pool_;
  Window* window_ = nullptr;
  size_t bytes_ = 0;
  MemoryTracker* tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::kOther;
};

}  // namespace fsdp::runtime
