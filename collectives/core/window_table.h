// Shared-memory windows of one communicator: for every window id, this rank's own mapping and where
// each peer's window of the same id is mapped in this process; and the control block (one per
// communicator) through which ranks publish their buffers and progress to each other.
//
// Memory comes from memfd_create: it has no name in /dev/shm, so nothing outlives the processes that
// map it. Peers map it by opening /proc/<pid>/fd/<fd> of the owner while the owner keeps the fd open
// (the same permission process_vm_readv needs: same user, ptrace allowed).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace fsdp {

// One mmap'ed range, unmapped on destruction. Move-only.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~Mapping() { reset(); }
  Mapping(Mapping&& o) noexcept : base_(o.base_), bytes_(o.bytes_) { o.base_ = nullptr; o.bytes_ = 0; }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  void reset();
  std::byte* data() const { return static_cast<std::byte*>(base_); }
  size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// The length of a memfd of `bytes`: rounded up to whole pages, at least one; 0 when that is more than
// a file can hold (an off_t; SIZE_MAX would wrap to one page).
size_t memfd_length(size_t bytes);
// What this host can back at most: physical memory plus swap, in bytes (sysinfo).
size_t host_backing_bytes();
// A fresh memfd of `bytes` (memfd_length of it) mapped read-write and populated; `fd` stays open for
// peers to map it (the caller closes it). Empty, with `error` set, on failure, and at once when the
// length is 0 or more than host_backing_bytes().
Mapping create_memfd(const char* name, size_t bytes, int& fd, std::string& error);
// Maps `bytes` of the memfd `fd` of process `pid` (this process included); empty and `error` set on failure.
Mapping map_peer_memfd(int pid, int fd, size_t bytes, std::string& error);

// Where a buffer lies in a window: id 0 means it is in none.
struct WindowRef {
  uint64_t id = 0;
  uint64_t offset = 0;
  bool windowed() const { return id != 0; }
};

// What one rank publishes for one operation: the buffers peers will read (in its windows) and how
// many bytes of each, so a reader checks bounds and agreement before touching them.
struct WindowPost {
  std::atomic<uint64_t> seq;  // the operation's sequence number + 1, stored last (release)
  WindowRef read;             // all-gather: this rank's block; reduce-scatter / all-reduce: the input
  WindowRef result;           // all-reduce: the output whose reduced block peers copy
  uint64_t read_bytes;
  uint64_t result_bytes;
};

// One rank's slots in the control block. Posts alternate by sequence parity, so a rank may post the
// next operation while a slow peer still reads the last one.
struct alignas(64) RankSync {
  WindowPost post[2];
  alignas(64) std::atomic<uint64_t> progress;  // (seq + 1) * kPhases + phase finished, monotone
};

// What a rank publishes for each peer q in an all-to-all over windows (all_to_all and all_to_all_v):
// where its block for q lies in its send buffer (bytes from the posted `read` reference), how long it
// is, and how many bytes it expects from q, so both ends of every pair check the pair's sizes.
struct PeerBlockPost {
  uint64_t offset;
  uint64_t send_bytes;
  uint64_t recv_bytes;
};

// The control block of n ranks: a RankSync per rank, then per rank and post slot n PeerBlockPosts.
size_t control_block_bytes(int n);

class WindowTable {
 public:
  WindowTable(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const { return rank_; }
  int size() const { return size_; }
  uint64_t next_id() { return ++last_id_; }  // every rank allocates windows in the same order

  // A peer's window as this process sees it: the peer's whole file mapped, the window at `offset`.
  struct PeerWindow {
    Mapping file;
    size_t offset = 0;
    size_t bytes = 0;
  };
  // A window: this rank's [data, data + bytes) (in `owned` when the window owns its memory) and every
  // peer's (by rank; this rank's entry unused; empty: not shared).
  void add(uint64_t id, Mapping owned, std::byte* data, size_t bytes, std::vector<PeerWindow> peers);
  // Frees the window's own memory and its peer mappings.
  void remove(uint64_t id);
  // Drops every peer mapping and the control block (abort, destroy); own memory stays the Window's.
  void release_peers();

  void set_control(Mapping control) {
    std::lock_guard lock(mu_);
    control_ = std::move(control);
  }
  // The control block: RankSync per rank; null until windows are shared, and after release_peers.
  RankSync* control() {
    std::lock_guard lock(mu_);
    return reinterpret_cast<RankSync*>(control_.data());
  }
  // The all-to-all block posts of the control block: rank p's for slot k at [(p * 2 + k) * size()];
  // null when control() is.
  PeerBlockPost* block_posts() {
    std::lock_guard lock(mu_);
    if (!control_.data()) return nullptr;
    return reinterpret_cast<PeerBlockPost*>(control_.data() + sizeof(RankSync) * static_cast<size_t>(size_));
  }

  // How many collectives ran over windows (tests and benchmarks check the path taken).
  void count_windowed_run() { windowed_runs_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t windowed_runs() const { return windowed_runs_.load(std::memory_order_relaxed); }

  // Which shared window holds [p, p + bytes) of this rank's memory; id 0 if none.
  WindowRef find(const void* p, size_t bytes);
  // Where `peer`'s window `ref` plus `bytes` lies in this process; null with `error` set when it is
  // not mapped here (freed, not shared) or the range runs past the peer's window.
  std::byte* peer_address(int peer, const WindowRef& ref, size_t bytes, std::string& error);

 private:
  struct Entry {
    Mapping owned;
    std::byte* data = nullptr;
    size_t bytes = 0;
    std::vector<PeerWindow> peers;
  };
  int rank_;
  int size_;
  uint64_t last_id_ = 0;
  std::mutex mu_;
  std::unordered_map<uint64_t, Entry> windows_;
  Mapping control_;
  std::atomic<uint64_t> windowed_runs_{0};
};

}  // namespace fsdp
