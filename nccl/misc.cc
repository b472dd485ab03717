// Version, error strings, memory, registration: the calls that involve no communication.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "nccl/comm.h"
#include "nccl/group.h"

using namespace fsdp::nccl;

namespace {

// What ncclMemAlloc gave out and not yet freed (pointer -> bytes), so that ncclMemFree of anything
// else is an error instead of free() of a foreign or already freed pointer.
struct Allocations {
  std::mutex mu;
  std::unordered_map<void*, size_t> live;
};

Allocations& allocations() {
  static Allocations* a = new Allocations;  // never destroyed: frees at exit still find it
  return *a;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  return api_call(nullptr, "ncclGetVersion", [&] {
    require(version != nullptr, "version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
  });
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (raw(result)) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (not raised by this CPU implementation)";
    case ncclSystemError: return "unhandled system error (sockets, shared memory, memory or protocol)";
    case ncclInternalError: return "internal error - please report this issue";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage (wrong call sequence or a finalized/aborted communicator)";
    case ncclRemoteError: return "remote process exited, closed its connection or timed out";
    case ncclInProgress: return "operation in progress";
    case ncclNumResults: break;
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) {
  // Each thread gets its own copy, valid until its next call.
  thread_local std::string text;
  try {
    text = last_error(comm);
  } catch (...) {
    text.clear();
  }
  return text.c_str();
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return api_call(nullptr, "ncclMemAlloc", [&] {
    require(ptr != nullptr, "ptr is NULL");
    *ptr = nullptr;
    void* p = nullptr;
    // Page-aligned, as window registration would want; at least one byte so the pointer is unique.
    if (::posix_memalign(&p, NCCL_WIN_REQUIRED_ALIGNMENT, size > 0 ? size : 1) != 0) {
      throw ApiError(ncclSystemError, "cannot allocate " + std::to_string(size) + " bytes");
    }
    {
      std::lock_guard<std::mutex> lock(allocations().mu);
      allocations().live.emplace(p, size);
    }
    *ptr = p;
    return ncclSuccess;
  });
}

ncclResult_t ncclMemFree(void* ptr) {
  return api_call(nullptr, "ncclMemFree", [&] {
    if (!ptr) return ncclSuccess;  // as free(NULL)
    {
      std::lock_guard<std::mutex> lock(allocations().mu);
      if (allocations().live.erase(ptr) == 0) {
        char text[32];
        std::snprintf(text, sizeof(text), "%p", ptr);
        throw ApiError(ncclInvalidArgument, std::string("ptr ") + text +
                                                " was not returned by ncclMemAlloc, or was freed already");
      }
    }
    std::free(ptr);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t, void** handle) {
  return api_call(comm, "ncclCommRegister", [&] {
    require(comm != nullptr, "comm is NULL");
    require(handle != nullptr, "handle is NULL");
    *handle = buff;  // host buffers need no registration
    return ncclSuccess;
  });
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void*) {
  return api_call(comm, "ncclCommDeregister", [&] {
    require(comm != nullptr, "comm is NULL");
    return ncclSuccess;
  });
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void*, size_t, ncclWindow_t* win, int) {
  return api_call(comm, "ncclCommWindowRegister", [&]() -> ncclResult_t {
    if (win) *win = nullptr;
    throw ApiError(ncclInvalidUsage, "symmetric memory windows are not supported (docs/nccl_api.md)");
  });
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t) {
  return api_call(comm, "ncclCommWindowDeregister", []() -> ncclResult_t {
    throw ApiError(ncclInvalidUsage, "symmetric memory windows are not supported (docs/nccl_api.md)");
  });
}

}  // extern "C"
