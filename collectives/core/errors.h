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
  CommError(ErrorContext ctx, const std::string& what) : std::runtime_error(describe(ctx, what)), ctx_(std::move(ctx)) {}
  const ErrorContext& context() const { return ctx_; }

 private:
  ErrorContext ctx_;
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

// Bad arguments, caught before anything was sent.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace fsdp
