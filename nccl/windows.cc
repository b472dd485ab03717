// ncclMemAlloc / ncclMemFree and ncclCommWindowRegister / ncclCommWindowDeregister over shared-memory
// windows (collectives/window.h, docs/nccl_api.md).
//
// ncclMemAlloc maps a memfd of its own and keeps the fd open until ncclMemFree, so any part of the
// allocation can later be made a window of any communicator: ncclCommWindowRegister hands (fd, offset)
// to Communicator::share_window, whose ranks map each other's files. Collectives whose buffers lie in
// registered windows on every rank then move data by loads and stores. Memory from anywhere else
// (malloc, the stack) has no file a peer could map, so registering it fails on every rank.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/core/window_table.h"
#include "collectives/types/errors.h"
#include "nccl/comm.h"
#include "nccl/group.h"

using namespace fsdp::nccl;

struct ncclWindow_vidmem {
  fsdp::Window window;
};

namespace {

// An ncclMemAlloc allocation: its memfd (open until ncclMemFree) and the mapping.
struct Allocation {
  int fd = -1;
  size_t bytes = 0;  // what the caller asked for
  fsdp::Mapping mapping;
};

// What ncclMemAlloc gave out and not yet freed, by address, so that ncclMemFree of anything else is
// an error instead of munmap of a foreign or already freed pointer, and registration finds the file.
struct Allocations {
  std::mutex mu;
  std::map<const std::byte*, Allocation> live;

  // The allocation holding [p, p + bytes), or null.
  const Allocation* holding(const void* p, size_t bytes) {
    const auto* b = static_cast<const std::byte*>(p);
    auto it = live.upper_bound(b);
    if (it == live.begin()) return nullptr;
    --it;
    const Allocation& a = it->second;
    return b + bytes <= a.mapping.data() + a.mapping.bytes() ? &a : nullptr;
  }
};

Allocations& allocations() {
  static Allocations* a = new Allocations;  // never destroyed: frees at exit still find it
  return *a;
}

std::string pointer_text(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

}  // namespace

extern "C" {

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return api_call(nullptr, "ncclMemAlloc", [&] {
    require(ptr != nullptr, "ptr is NULL");
    *ptr = nullptr;
    Allocation a;
    std::string error;
    // Page-aligned (NCCL_WIN_REQUIRED_ALIGNMENT), at least one page so the pointer is unique. A size no
    // file can hold is the caller's mistake; one this host cannot back, the system's refusal.
    require(fsdp::memfd_length(size) != 0,
            "size " + std::to_string(size) + " rounded up to whole pages is more than a file can hold");
    a.mapping = fsdp::create_memfd("fsdp-ncclMemAlloc", size, a.fd, error);
    if (!a.mapping.data()) throw ApiError(ncclSystemError, "cannot allocate " + std::to_string(size) + " bytes: " + error);
    a.bytes = size;
    void* p = a.mapping.data();
    {
      std::lock_guard<std::mutex> lock(allocations().mu);
      allocations().live.emplace(a.mapping.data(), std::move(a));
    }
    *ptr = p;
    return ncclSuccess;
  });
}

ncclResult_t ncclMemFree(void* ptr) {
  return api_call(nullptr, "ncclMemFree", [&] {
    if (!ptr) return ncclSuccess;  // as free(NULL)
    Allocation gone;
    {
      std::lock_guard<std::mutex> lock(allocations().mu);
      auto it = allocations().live.find(static_cast<const std::byte*>(ptr));
      if (it == allocations().live.end()) {
        throw ApiError(ncclInvalidArgument,
                       "ptr " + pointer_text(ptr) + " was not returned by ncclMemAlloc, or was freed already");
      }
      gone = std::move(it->second);
      allocations().live.erase(it);
    }
    ::close(gone.fd);  // and the mapping goes with `gone`; peers that still map it keep their view
    return ncclSuccess;
  });
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int) {
  return api_call(comm, "ncclCommWindowRegister", [&] {
    require(comm != nullptr, "comm is NULL");
    require(win != nullptr, "win is NULL");
    *win = nullptr;
    require(buff != nullptr && size > 0, "buff is NULL or size is 0");
    fsdp::Communicator& c = usable(comm);
    int fd = -1;
    size_t offset = 0, file_bytes = 0;
    {
      std::lock_guard<std::mutex> lock(allocations().mu);
      if (const Allocation* a = allocations().holding(buff, size)) {
        fd = a->fd;
        offset = static_cast<size_t>(static_cast<const std::byte*>(buff) - a->mapping.data());
        file_bytes = a->mapping.bytes();
      }
    }
    // Collective: a rank whose buffer is not from ncclMemAlloc still takes part (fd -1), so every
    // rank fails together, naming it, instead of the others waiting for it.
    auto w = std::make_unique<ncclWindow_vidmem>();
    try {
      w->window = c.share_window(buff, size, fd, offset, file_bytes);
    } catch (const fsdp::PeerLostError&) {
      throw;  // the communicator is broken: reported as such
    } catch (const fsdp::TimeoutError&) {
      throw;
    } catch (const fsdp::CommError& e) {
      // A rank's buffer was not ncclMemAlloc memory: every rank refused alike, the communicator intact.
      throw ApiError(ncclInvalidArgument, std::string(e.what()) + " (only memory from ncclMemAlloc can be a window)");
    }
    *win = w.release();
    return ncclSuccess;
  });
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return api_call(comm, "ncclCommWindowDeregister", [&] {
    require(comm != nullptr, "comm is NULL");
    require(win != nullptr, "win is NULL");
    delete win;  // this rank stops mapping its peers' windows of that id
    return ncclSuccess;
  });
}

}  // extern "C"
