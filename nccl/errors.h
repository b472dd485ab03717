// How C++ failures become NCCL result codes and ncclGetLastError text at the C boundary.
//
//   fsdp::InvalidArgument                      -> ncclInvalidArgument   (communicator still usable)
//   ApiError(code)                             -> code                  (checks of the C layer itself)
//   TimeoutError, PeerLostError                -> ncclRemoteError       (communicator broken)
//   AbortedError                               -> ncclInvalidUsage      (broken: it was aborted)
//   CommError (protocol, sockets, shm set-up)  -> ncclSystemError       (broken)
//   std::bad_alloc, std::system_error          -> ncclSystemError
//   anything else                              -> ncclInternalError
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include "nccl/api.h"

namespace fsdp::nccl {

// A failure the C layer detects itself (bad handle, wrong call sequence), with the code to return.
class ApiError : public std::runtime_error {
 public:
  ApiError(ncclResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ncclResult_t code() const { return code_; }

 private:
  ncclResult_t code_;
};

struct Classified {
  ncclResult_t code = ncclInternalError;
  bool breaks_comm = false;  // a CommError: the communicator must be aborted and recreated
  std::string text;
};
Classified classify(const std::exception_ptr& error);

// Records `text` as the process's last error (and comm's, when not null), printing it when
// FSDP_NCCL_DEBUG (or NCCL_DEBUG) is WARN or INFO.
void record_error(ncclComm* comm, const std::string& text);
// The text ncclGetLastError returns: comm's last error when it has one, else the process's.
std::string last_error(ncclComm* comm);

// FSDP_NCCL_DEBUG, else NCCL_DEBUG: 0 off, 1 WARN, 2 INFO.
int debug_level();
void debug_info(const std::string& text);

}  // namespace fsdp::nccl
