// Version, error strings, local registration: the calls that involve no communication.
#include <string>

#include "nccl/comm.h"
#include "nccl/group.h"

using namespace fsdp::nccl;

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

}  // extern "C"
