// Exceptions the collectives throw. Every communication failure carries the context an operator
// needs to find the culprit: this rank, the peer, the operation, its sequence number and its size.
//
// Contract (see docs/errors.md): after a CommError the communicator that raised it is broken; call
// abort() on it and create a new one. InvalidArgument leaves the communicator usable: nothing was sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/errors.h"

namespace fsdp {

// What failed, where. -1 marks a field that does not apply (e.g. no single peer).
struct ErrorContext {
  int rank = -1;
  int peer = -1;
  std::string op;
  uint64_t seq = 0;
  size_t bytes = 0;
};

// Renders "rank 3, peer 4, op all_gather, seq 17, 1048576 bytes: <what>".
std::string describe(const ErrorContext& ctx, const std::string& what);

class CommError : public std::runtime_error {
 public:
  CommError(ErrorContext ctx, const std::string& what)
      : std::runtime_error(describe(ctx, what)), ctx_(std::move(ctx)), detail_(what) {}
  const ErrorContext& context() const { return ctx_; }
  const std::string& detail() const { return detail_; }  // the message without the context prefix

 private:
  ErrorContext ctx_;
  std::string detail_;
};

// A wait ran past its deadline.
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// A peer process vanished or its channel broke.
class PeerLostError : public CommError {
 public:
  using CommError::CommError;
};

// The communicator was aborted while the operation was in flight.
class AbortedError : public CommError {
 public:
  using CommError::CommError;
};

// Ranks called different collectives (or the same one with different arguments) at one sequence
// number: found by the fingerprint check (collectives/core/fingerprint.h), on every rank at once.
class MismatchError : public CommError {
 public:
  using CommError::CommError;
};

// A failure as plain data. The engine thread records it, and each waiting thread throws its own
// fresh exception from it: no exception object is ever shared between threads.
struct Failure {
  enum class Kind { kComm, kTimeout, kPeerLost, kAborted, kMismatch, kOther };
  Kind kind = Kind::kOther;
  ErrorContext ctx;
  std::string detail;
};
Failure to_failure(const std::exception_ptr& error);
[[noreturn]] void throw_failure(const Failure& failure);

}  // namespace fsdp
