#include "collectives/core/window_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace fsdp {
namespace {

std::string errno_text(const std::string& call, int err) {
  return call + " failed: " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
}

}  // namespace

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = o.base_;
    bytes_ = o.bytes_;
    o.base_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Mapping::reset() {
  if (base_) ::munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

size_t control_block_bytes(int n) {
  const auto ranks = static_cast<size_t>(n);
  return sizeof(RankSync) * ranks + sizeof(PeerBlockPost) * 2 * ranks * ranks;
}

size_t memfd_length(size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  constexpr auto kMaxFile = static_cast<size_t>(std::numeric_limits<off_t>::max());
  if (bytes > kMaxFile / page * page) return 0;  // rounded up it would pass what ftruncate takes (or wrap)
  return std::max<size_t>(page, (bytes + page - 1) / page * page);
}

size_t host_backing_bytes() {
  struct sysinfo info {};
  if (::sysinfo(&info) != 0) return std::numeric_limits<size_t>::max();  // unknown: the kernel decides
  size_t units = 0, bytes = 0;
  if (__builtin_add_overflow(info.totalram, info.totalswap, &units) ||
      __builtin_mul_overflow(units, size_t{info.mem_unit}, &bytes)) {
    return std::numeric_limits<size_t>::max();
  }
  return bytes;
}

Mapping create_memfd(const char* name, size_t bytes, int& fd, std::string& error) {
  fd = -1;
  const size_t length = memfd_length(bytes);
  if (length == 0) {
    error = std::to_string(bytes) + " bytes rounded up to whole pages is more than a file can hold";
    return {};
  }
  // Populated at once below: a length the host cannot back would stall in reclaim or wake the OOM
  // killer (a 16 TiB request ran for minutes) instead of failing here.
  if (const size_t backing = host_backing_bytes(); length > backing) {
    error = std::to_string(length) + " bytes is more than this host's physical memory and swap (" +
            std::to_string(backing) + " bytes)";
    return {};
  }
  fd = ::memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) {
    error = errno_text("memfd_create", errno);
    return {};
  }
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) {
    error = errno_text("ftruncate of a " + std::to_string(length) + "-byte memfd", errno);
    ::close(fd);
    fd = -1;
    return {};
  }
  // Populated here, by the owner: its pages are allocated near it, and no collective pays the faults.
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    error = errno_text("mmap of a " + std::to_string(length) + "-byte memfd", errno);
    ::close(fd);
    fd = -1;
    return {};
  }
  return Mapping(base, length);
}

Mapping map_peer_memfd(int pid, int fd, size_t bytes, std::string& error) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    error = errno_text("open(" + path + ")", errno) +
            " (ranks must run as one user with ptrace allowed between them: kernel.yama.ptrace_scope=0)";
    return {};
  }
  const size_t length = memfd_length(bytes);
  if (length == 0) {
    error = "a peer's memfd of " + std::to_string(bytes) + " bytes is more than a file can hold";
    return {};
  }
  // Populated: the page tables of the peer's window are filled now, not on a collective's first read.
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mine, 0);
  const int err = errno;
  ::close(mine);  // the mapping keeps the memory
  if (base == MAP_FAILED) {
    error = errno_text("mmap of " + path, err);
    return {};
  }
  return Mapping(base, length);
}

void WindowTable::add(uint64_t id, Mapping owned, std::byte* data, size_t bytes, std::vector<PeerWindow> peers) {
  std::lock_guard lock(mu_);
  windows_[id] = Entry{std::move(owned), data, bytes, std::move(peers)};
}

void WindowTable::remove(uint64_t id) {
  Entry gone;
  {
    std::lock_guard lock(mu_);
    auto it = windows_.find(id);
    if (it == windows_.end()) return;
    gone = std::move(it->second);
    windows_.erase(it);
  }
}

void WindowTable::release_peers() {
  std::lock_guard lock(mu_);
  for (auto& [id, entry] : windows_) entry.peers.clear();
  control_.reset();
}

WindowRef WindowTable::find(const void* p, size_t bytes) {
  const auto* b = static_cast<const std::byte*>(p);
  std::lock_guard lock(mu_);
  if (!control_.data()) return {};
  for (const auto& [id, entry] : windows_) {
    if (entry.peers.empty()) continue;
    if (b >= entry.data && b + bytes <= entry.data + entry.bytes) {
      return WindowRef{id, static_cast<uint64_t>(b - entry.data)};
    }
  }
  return {};
}

std::byte* WindowTable::peer_address(int peer, const WindowRef& ref, size_t bytes, std::string& error) {
  std::lock_guard lock(mu_);
  auto it = windows_.find(ref.id);
  if (it == windows_.end() || it->second.peers.empty()) {
    error = "window " + std::to_string(ref.id) + " of rank " + std::to_string(peer) + " is not mapped on rank " +
            std::to_string(rank_) + " (freed here already, or never shared): windows must be freed on every rank "
            "only after the collectives using them completed";
    return nullptr;
  }
  const Entry& e = it->second;
  const PeerWindow& w = e.peers[static_cast<size_t>(peer)];
  std::byte* base = peer == rank_ ? e.data : w.file.data() + w.offset;
  const size_t window_bytes = peer == rank_ ? e.bytes : w.bytes;
  if (ref.offset > window_bytes || bytes > window_bytes - ref.offset) {
    error = "rank " + std::to_string(peer) + " posted " + std::to_string(bytes) + " bytes at offset " +
            std::to_string(ref.offset) + " of its " + std::to_string(window_bytes) + "-byte window " +
            std::to_string(ref.id) + " (do the ranks pass the same count?)";
    return nullptr;
  }
  return base + ref.offset;
}

}  // namespace fsdp
