// Shared windows: alloc_window and share_window (the exchange that maps every rank's memory), and
// where a collective's buffers lie in them.
#include <unistd.h>

#include <algorithm>

#include "collectives/communicator_impl.h"

namespace fsdp {

WindowPlan Communicator::Impl::window_plan(const void* read, size_t read_bytes, const void* fallback_read,
                                           const void* result, size_t result_bytes, bool needs_result) const {
  if (!windows || group.endpoints.size() < 2 || read_bytes == 0 || !windows->control()) return {};
  WindowPlan p{windows, windows->find(read, read_bytes), read_bytes, {}, result_bytes, needs_result};
  if (!p.read.windowed() && fallback_read) p.read = windows->find(fallback_read, read_bytes);
  if (needs_result) p.result = windows->find(result, result_bytes);
  return p;
}

WindowPlan Communicator::Impl::window_plan_all_to_all(const void* send, size_t extent) const {
  if (!windows || group.endpoints.size() < 2 || !windows->control()) return {};
  return WindowPlan{windows, send ? windows->find(send, extent) : WindowRef{}, extent};
}

Window Communicator::alloc_window(size_t bytes, MemoryTracker* tracker, MemoryCategory category) {
  int fd = -1;
  std::string error;
  Mapping own = create_memfd("fsdp-window", bytes, fd, error);
  std::byte* data = own.data();
  const size_t file_bytes = own.bytes();
  Window w;
  try {
    w = make_window(std::move(own), data, bytes, fd, 0, file_bytes, error);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    throw;
  }
  if (fd >= 0) ::close(fd);  // every peer mapped it (or never will): the mappings keep the memory
  if (tracker) {
    w.tracker_ = tracker;
    w.category_ = category;
    tracker->allocate(category, static_cast<int64_t>(bytes));
  }
  return w;
}

Window Communicator::share_window(void* data, size_t bytes, int fd, size_t offset, size_t file_bytes) {
  if (fd >= 0 && (offset > file_bytes || bytes > file_bytes - offset)) {
    throw InvalidArgument("share_window on rank " + std::to_string(rank()) + ": " + std::to_string(bytes) +
                          " bytes at offset " + std::to_string(offset) + " run past the " +
                          std::to_string(file_bytes) + "-byte file");
  }
  return make_window(Mapping(), static_cast<std::byte*>(data), bytes, fd, offset, file_bytes,
                     fd < 0 ? "its buffer is not in shareable memory (alloc_window, ncclMemAlloc)" : "");
}

Window Communicator::make_window(Mapping owned, std::byte* data, size_t bytes, int fd, size_t offset,
                                 size_t file_bytes, const std::string& error_here) {
  const int n = size();
  const int me = rank();
  if (!impl_->windows) impl_->windows = std::make_shared<WindowTable>(me, n);
  WindowTable& table = *impl_->windows;
  const ErrorContext ctx{global_rank(me), -1, "alloc_window", impl_->next_seq, bytes};
  Window w;
  w.table_ = impl_->windows;
  w.id_ = table.next_id();
  w.bytes_ = bytes;
  w.data_ = data;
  std::string error = error_here;
  std::vector<WindowTable::PeerWindow> peers;

  if (!impl_->transport->shares_host_memory()) {
    if (fd < 0) throw CommError(ctx, "could not allocate a window: " + error);
    w.why_not_shared_ =
        "the " + std::string(impl_->transport->name()) + " transport does not share memory between ranks";
  } else {
    // Every rank learns every peer's memfd, maps it while its owner keeps the fd open, and reports
    // back; the second exchange is also the point after which the fds may close.
    const bool first = !table.control();
    int control_fd = -1;
    Mapping control;
    const size_t control_bytes = control_block_bytes(n);
    if (first && me == 0 && fd >= 0) control = create_memfd("fsdp-window-control", control_bytes, control_fd, error);
    const bool ready = fd >= 0 && (!first || me != 0 || control.data());
    constexpr size_t kFields = 6;  // pid, fd, file bytes, control fd, offset, window bytes
    std::vector<int64_t> mine{::getpid(), ready ? fd : -1, static_cast<int64_t>(file_bytes), control_fd,
                              static_cast<int64_t>(offset), static_cast<int64_t>(bytes)};
    std::vector<int64_t> all(kFields * static_cast<size_t>(n));
    auto close_control = [&] {
      if (control_fd >= 0) ::close(control_fd);
      control_fd = -1;
    };
    try {
      all_gather(mine.data(), all.data(), kFields, DataType::kInt64).wait();
    } catch (...) {
      close_control();
      throw;
    }
    for (int p = 0; p < n; ++p) {
      if (all[kFields * p + 1] >= 0) continue;
      close_control();
      throw CommError(ctx, "rank " + std::to_string(p) + " has no window of " + std::to_string(bytes) + " bytes" +
                               (p == me ? ": " + error : std::string(" (its own error says why)")));
    }
    peers.resize(static_cast<size_t>(n));
    for (int p = 0; p < n && error.empty(); ++p) {
      const int64_t* r = &all[kFields * p];
      if (p == me) continue;
      peers[p].file = map_peer_memfd(static_cast<int>(r[0]), static_cast<int>(r[1]), static_cast<size_t>(r[2]), error);
      peers[p].offset = static_cast<size_t>(r[4]);
      peers[p].bytes = static_cast<size_t>(r[5]);
    }
    if (first && me != 0 && error.empty()) {
      control = map_peer_memfd(static_cast<int>(all[0]), static_cast<int>(all[3]), control_bytes, error);
    }
    int64_t mapped = error.empty() ? 1 : 0;
    std::vector<int64_t> everyone(static_cast<size_t>(n));
    try {
      all_gather(&mapped, everyone.data(), 1, DataType::kInt64).wait();
    } catch (...) {
      close_control();
      throw;
    }
    close_control();
    const auto refused = std::find(everyone.begin(), everyone.end(), 0);
    if (refused == everyone.end()) {
      if (first) table.set_control(std::move(control));
      w.shared_ = true;
    } else {
      peers.clear();
      const int who = static_cast<int>(refused - everyone.begin());
      w.why_not_shared_ = "rank " + std::to_string(who) + " could not map its peers' windows" +
                          (who == me ? ": " + error : std::string(" (its error says why)"));
    }
  }
  table.add(w.id_, std::move(owned), data, bytes, std::move(peers));
  return w;
}

}  // namespace fsdp
