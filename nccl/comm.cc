#include "nccl/comm.h"

#include <cstdio>
#include <unordered_set>

#include "common/float_formats.h"

namespace fsdp::nccl {
namespace {

struct Handles {
  std::mutex mu;
  std::unordered_set<const ncclComm*> held;      // given out, not yet destroyed or aborted
  std::unordered_set<const ncclComm*> released;  // destroyed or aborted (forgotten past kMaxReleased)
};
constexpr size_t kMaxReleased = 4096;

// Never destroyed: a call from another static destructor at exit still finds it.
Handles& handles() {
  static Handles* h = new Handles;
  return *h;
}

}  // namespace

void pin(ncclComm* c) { c->refs.fetch_add(1, std::memory_order_relaxed); }

void unpin(ncclComm* c) {
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  {
    // A communicator freed without ever being released (a failed init): forget its address too.
    std::lock_guard<std::mutex> lock(handles().mu);
    handles().held.erase(c);
  }
  delete c;
}

void register_handle(ncclComm* c) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  h.released.erase(c);
  h.held.insert(c);
}

bool release_handle(ncclComm* c) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  if (h.held.erase(c) == 0) return false;
  if (h.released.size() >= kMaxReleased) h.released.clear();
  h.released.insert(c);
  return true;
}

bool pin_if_held(ncclComm* c) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  if (h.held.count(c) == 0) return false;
  pin(c);  // under the lock: the handle's own reference cannot be dropped meanwhile
  return true;
}

std::exception_ptr not_a_handle(const ncclComm* c) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", static_cast<const void*>(c));
  bool destroyed = false;
  {
    std::lock_guard<std::mutex> lock(handles().mu);
    destroyed = handles().released.count(c) > 0;
  }
  return std::make_exception_ptr(ApiError(
      ncclInvalidArgument, destroyed ? std::string("comm ") + text +
                                           " was destroyed or aborted (ncclCommDestroy/ncclCommAbort); it may not "
                                           "be used afterwards"
                                     : std::string("comm ") + text +
                                           " is not a communicator of this library (uninitialized, corrupted, or "
                                           "from another NCCL)"));
}

std::string where(const char* fn, const ncclComm* c) {
  std::string s = fn;
  if (!c) return s;
  s += " on rank " + std::to_string(c->rank) + " of " + std::to_string(c->size);
  if (!c->name.empty()) s += " (comm '" + c->name + "')";
  return s;
}

std::shared_ptr<ncclComm> hold(ncclComm* c) {
  pin(c);
  return std::shared_ptr<ncclComm>(c, [](ncclComm* p) { unpin(p); });
}

Communicator& usable(ncclComm* comm) {
  if (!comm) throw ApiError(ncclInvalidArgument, "comm is NULL");
  std::lock_guard<std::mutex> lock(comm->mu);
  if (comm->aborted) throw ApiError(ncclInvalidUsage, "the communicator was aborted");
  if (comm->finalized || !comm->comm) {
    throw ApiError(ncclInvalidUsage, "the communicator was finalized; only ncclCommDestroy may follow");
  }
  if (comm->async_error != ncclSuccess) {
    throw ApiError(comm->async_error, std::string("the communicator is broken by an earlier error (") +
                                          comm->broken_by +
                                          "); abort it with ncclCommAbort and create a new one");
  }
  return *comm->comm;
}

void mark_broken(ncclComm* comm, const Classified& c) {
  std::lock_guard<std::mutex> lock(comm->mu);
  if (comm->async_error != ncclSuccess) return;  // the first error is the one worth reporting
  comm->async_error = c.code;
  comm->broken_by = c.text;
}

ncclResult_t fail(ncclComm* comm, const char* fn, const std::exception_ptr& error, bool record) noexcept {
  try {
    Classified c = classify(error);
    c.text = where(fn, comm) + ": " + c.text;
    if (comm && c.breaks_comm) mark_broken(comm, c);
    if (record) record_error(comm, c.text);
    return c.code;
  } catch (...) {
    return ncclInternalError;  // only if even composing the message ran out of memory
  }
}

DataType data_type(const ncclDataType_t& t) {
  const int v = raw(t);
  if (v < 0 || v >= kNumDataTypes) {
    throw ApiError(ncclInvalidArgument, "invalid data type " + std::to_string(v) + " (valid: 0 to " +
                                            std::to_string(kNumDataTypes - 1) + ", ncclInt8 to ncclFloat8e5m2)");
  }
  return static_cast<DataType>(v);
}

ReduceOp reduce_op(ncclComm* comm, const ncclRedOp_t& op, DataType t) {
  const int v = raw(op);
  if (v >= 0 && v < ncclNumOps) return ReduceOp{static_cast<ReduceKind>(v), 1.0};
  const long index = static_cast<long>(v) - ncclNumOps;
  UserOp u;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (index >= 0 && index < static_cast<long>(comm->user_ops.size())) u = comm->user_ops[index];
  }
  if (!u.live) {
    throw ApiError(ncclInvalidArgument, "invalid reduction op " + std::to_string(v) +
                                            ": neither a built-in op (0 to 4) nor a live "
                                            "ncclRedOpCreatePreMulSum handle of this communicator");
  }
  if (u.type != t) {
    throw ApiError(ncclInvalidArgument, "premul-sum op " + std::to_string(v) + " was made for type " +
                                            std::string(name(u.type)) + " but the operation is on " +
                                            std::string(name(t)));
  }
  return ReduceOp::premul_sum(u.immediate ? u.scalar : read_scalar(u.where, u.type));
}

double read_scalar(const void* p, DataType t) {
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case DataType::kInt8: return get(int8_t{});
    case DataType::kUint8: return get(uint8_t{});
    case DataType::kInt32: return get(int32_t{});
    case DataType::kUint32: return get(uint32_t{});
    case DataType::kInt64: return static_cast<double>(get(int64_t{}));
    case DataType::kUint64: return static_cast<double>(get(uint64_t{}));
    case DataType::kFloat16: return half_to_float(get(uint16_t{}));
    case DataType::kFloat32: return get(float{});
    case DataType::kFloat64: return get(double{});
    case DataType::kBfloat16: return bf16_to_float(get(uint16_t{}));
    case DataType::kFloat8E4M3: return e4m3_to_float(get(uint8_t{}));
    case DataType::kFloat8E5M2: return e5m2_to_float(get(uint8_t{}));
  }
  throw ApiError(ncclInvalidArgument, "invalid data type " + std::to_string(static_cast<int>(t)));
}

}  // namespace fsdp::nccl
