// Internal: what an ncclComm_t points to, and the plumbing every API call on it goes through.
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "launch/world.h"
#include "nccl/api.h"
#include "nccl/errors.h"

namespace fsdp::nccl {

// A premul-sum operator made by ncclRedOpCreatePreMulSum; its handle is ncclNumOps + index.
struct UserOp {
  bool live = false;
  DataType type = DataType::kFloat32;
  bool immediate = true;         // ncclScalarHostImmediate: `scalar` was read at creation
  double scalar = 1.0;
  const void* where = nullptr;   // ncclScalarDevice: read again by every call that uses the op
};

// Reads one element of type t at p as a double (the premul-sum scalar).
double read_scalar(const void* p, DataType t);

}  // namespace fsdp::nccl

struct ncclComm {
  // One reference for the handle the user holds, one per API call in progress and one per operation
  // queued in a group: ncclCommAbort from another thread never frees it under a blocked call.
  std::atomic<int> refs{1};

  int rank = 0;
  int size = 1;
  std::string name;  // ncclConfig_t::commName, shown in error messages

  // Exactly one owns the communicator: `world` for ncclCommInitRank (rendezvous, store, transport,
  // orderly shutdown), `owned` for ncclCommInitAll, ncclCommSplit and ncclCommShrink. A shrunk
  // communicator also shares its parent's world: the heartbeat that keeps the survivors from looking
  // frozen to each other, and the orderly shutdown, last as long as the parent or any shrunk child.
  std::shared_ptr<fsdp::launch::World> world;
  std::unique_ptr<fsdp::Communicator> owned;
  fsdp::Communicator* comm = nullptr;  // null once finalized

  std::mutex mu;  // guards everything below
  ncclResult_t async_error = ncclSuccess;
  std::string broken_by;   // the error that broke it
  std::string last_error;
  std::chrono::steady_clock::time_point next_probe{};  // ncclCommGetAsyncError's next look at the peers
  bool finalized = false;
  bool aborted = false;
  std::vector<fsdp::nccl::UserOp> user_ops;
};

namespace fsdp::nccl {

void pin(ncclComm* c);
void unpin(ncclComm* c);  // frees it with the last reference

// The handles the library gave out and the user still holds. Every call that takes an ncclComm_t
// checks it here before touching it, so a communicator used after ncclCommDestroy/ncclCommAbort, or a
// pointer that never was one, is ncclInvalidArgument naming the pointer instead of a read of freed or
// foreign memory. (A destroyed handle whose address a newer communicator reuses is that communicator:
// no check can tell them apart without handing out something other than a pointer.)
void register_handle(ncclComm* c);
// Drops c from the held handles (ncclCommDestroy, ncclCommAbort): false if it was already dropped.
bool release_handle(ncclComm* c);
// Pins c if the user still holds it.
bool pin_if_held(ncclComm* c);
// The error for a handle that is not held: "was destroyed" or "is not a communicator".
std::exception_ptr not_a_handle(const ncclComm* c);

// Holds a reference for one API call on a handle the user passed, if it is one they hold.
class HandlePin {
 public:
  explicit HandlePin(ncclComm* c) : c_(c && pin_if_held(c) ? c : nullptr), valid_(!c || c_) {}
  ~HandlePin() {
    if (c_) unpin(c_);
  }
  bool valid() const { return valid_; }
  HandlePin(const HandlePin&) = delete;
  HandlePin& operator=(const HandlePin&) = delete;

 private:
  ncclComm* c_;
  bool valid_;
};

// "ncclAllReduce on rank 2 of 4 ('name')": how the C layer's own messages start.
std::string where(const char* fn, const ncclComm* c);

// Holds a reference until the last copy is gone: what queued actions capture.
std::shared_ptr<ncclComm> hold(ncclComm* c);

// Throws ApiError unless comm can run operations: not null, not finalized or aborted, not broken by an
// earlier failure (then its code and the first error). Returns the communicator.
Communicator& usable(ncclComm* comm);

// Marks comm broken by `c` (a CommError) so later calls and ncclCommGetAsyncError report it.
void mark_broken(ncclComm* comm, const Classified& c);

// The result code for `error` raised by fn: records its text (for comm too when not null) unless
// `record` is false, and marks comm broken where the error means that. Never throws.
ncclResult_t fail(ncclComm* comm, const char* fn, const std::exception_ptr& error, bool record = true) noexcept;

// Runs body() (which returns an ncclResult_t) and turns anything it throws into fail()'s code.

template <class Body>
ncclResult_t guarded(ncclComm* comm, const char* fn, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return fail(comm, fn, std::current_exception());
  }
}

// guarded() for a call on a handle the user passed (null allowed): checked and pinned first; one
// that is not held fails with not_a_handle() and is never touched.
template <class Body>
ncclResult_t with_handle(ncclComm* comm, const char* fn, Body&& body) noexcept {
  HandlePin pin(comm);
  if (!pin.valid()) return fail(nullptr, fn, not_a_handle(comm));
  return guarded(comm, fn, body);
}

// Throws ApiError(ncclInvalidArgument, what) unless ok.
inline void require(bool ok, const std::string& what) {
  if (!ok) throw ApiError(ncclInvalidArgument, what);
}

// The int a C caller passed as one of the API's enums. A C enum argument may hold any int, but in C++
// loading a value outside the enumerators' range is undefined, so arguments are only ever read
// through this (by address, never as the enum type).
template <class Enum>
int raw(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int), "the API's enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

// Converts and checks the C enums (passed by reference, see raw()). Both throw
// ApiError(ncclInvalidArgument) naming the value.
DataType data_type(const ncclDataType_t& t);
ReduceOp reduce_op(ncclComm* comm, const ncclRedOp_t& op, DataType t);

}  // namespace fsdp::nccl
