// A buffer every rank of a communicator on one host maps: Communicator::alloc_window returns one.
// Collectives whose buffers lie in windows on every rank move data by plain loads and stores between
// the mapped buffers (no staging, no process_vm_readv); elsewhere they run as before.
//
//   Window w = comm.alloc_window(bytes, &tracker, MemoryCategory::kAllGather);  // collective
//   comm.all_gather(w.data<std::byte>() + rank * shard, w.data(), count, type);  // in place, windowed
//
// Freeing is local, but peers keep reading a window in collectives that use it: free windows on every
// rank only after those collectives completed (as ncclCommWindowDeregister). The memory is anonymous
// (memfd): nothing is left in /dev/shm, and it goes when the last process mapping it exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/memory_tracker.h"

namespace fsdp {

class WindowTable;

class Window {
 public:
  Window() = default;
  ~Window() { reset(); }
  Window(Window&& o) noexcept { swap(o); }
  Window& operator=(Window&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* data() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }
  uint64_t id() const { return id_; }
  // Whether every rank of the communicator maps it (collectives over it take the windowed path).
  bool shared() const { return shared_; }
  // Why not, when !shared() (ranks on several hosts, a transport without shared memory, a peer that
  // may not map this process's memory).
  const std::string& why_not_shared() const { return why_not_shared_; }

  // Frees the memory (and this rank's mappings of the peers' windows of the same id).
  void reset();

 private:
  friend class Communicator;
  void swap(Window& o) noexcept;

  std::shared_ptr<WindowTable> table_;
  uint64_t id_ = 0;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool shared_ = false;
  std::string why_not_shared_;
  MemoryTracker* tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::kOther;
};

}  // namespace fsdp
