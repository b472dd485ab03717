// One communication operation in flight, and the context its algorithm runs in.
//
// The algorithm (a Task coroutine) posts sends and receives through the Op and `co_await`s them;
// while it waits, the Op records what it waits for and where to resume, and the progress engine
// resumes it once those requests completed, failed, or the deadline passed.
//
// Ops are reused: a communicator takes them from its OpPool (op_pool.h) and gets them back when the
// last reference goes; the frames and lists of the algorithm live in the Op's arena (op_arena.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <initializer_list>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <vector>

#include "collectives/core/op_arena.h"
#include "collectives/core/task.h"
#include "collectives/transports/transport.h"
#include "collectives/types/errors.h"

namespace fsdp {

using Clock = std::chrono::steady_clock;

// Buffers reused across the operations of one communicator (they run one at a time), so a 64 MiB
// reduce-scatter does not page-fault fresh memory on every call.
class ScratchPool {
 public:
  std::byte* get(int index, size_t bytes);

 private:
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t bytes = 0;
  };
  std::vector<Buffer> buffers_;
};

class Op;

// Requests an algorithm waits on together, kept in the operation's arena.
using RequestList = std::pmr::vector<RequestPtr>;

// Awaitable: resumes the coroutine when every request has left kPending; throws a CommError naming
// the peer of the first failed one.
class WaitAll {
 public:
  WaitAll(Op& op, RequestList requests) : op_(op), requests_(std::move(requests)) {}
  bool await_ready() const;
  void await_suspend(std::coroutine_handle<> h);
  void await_resume() const;

 private:
  Op& op_;
  RequestList requests_;
};

// Awaitable: resumes the coroutine once `ready()` holds (a flag in shared memory a peer sets). The
// wait stands for a receive of `bytes` from `peer` (an endpoint), so timeouts and the liveness check
// name that peer exactly as they do for a message. The predicate stays in the awaiter (in the
// coroutine's frame) while the Op polls it: nothing is allocated.
template <class Ready>
class WaitUntil {
 public:
  WaitUntil(Op& op, int peer, size_t bytes, Ready ready) : op_(op), peer_(peer), bytes_(bytes), ready_(std::move(ready)) {}
  bool await_ready() const { return ready_(); }
  void await_suspend(std::coroutine_handle<> h);
  void await_resume() const {}

 private:
  Op& op_;
  int peer_;
  size_t bytes_;
  Ready ready_;
};

// The communicator-side facts an algorithm needs, fixed for the communicator's life.
struct GroupView {
  int rank = 0;                 // this rank in the communicator
  std::vector<int> endpoints;   // communicator rank -> transport endpoint
  uint64_t context = 0;         // tag context: distinct per communicator
};

class Op {
 public:
  enum class State : int { kPending, kDone, kFailed };

  Op(Transport& transport, ScratchPool& scratch);
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  // Readies the Op for one operation (a new one, or one OpPool recycled).
  void begin(ErrorContext ctx, const GroupView& group, size_t chunk_bytes, Clock::duration timeout);
  // Drops everything of the finished operation (its coroutines, requests, failure) and keeps the
  // capacity (arena, request lists) for the next.
  void recycle();
  Op* next_idle = nullptr;  // OpPool's link while the Op waits there

  // --- used by algorithms ---
  int rank() const { return group_->rank; }
  int size() const { return static_cast<int>(group_->endpoints.size()); }
  // The transport endpoint of each rank of the operation's communicator.
  const std::vector<int>& endpoints() const { return group_->endpoints; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  // `slot` tells apart the transfers of one operation between the same two ranks (step, chunk).
  RequestPtr send(int peer, uint32_t slot, const void* data, size_t bytes);
  RequestPtr recv(int peer, uint32_t slot, void* data, size_t bytes);
  // (Separate overloads, not an initializer list: g++ 12 miscompiles braced lists inside co_await.)
  WaitAll wait(RequestPtr a);
  WaitAll wait(RequestPtr a, RequestPtr b);
  WaitAll wait(RequestList requests) { return WaitAll(*this, std::move(requests)); }
  WaitAll wait(const std::vector<RequestPtr>& requests);
  // An empty list in this operation's arena.
  RequestList request_list() { return RequestList(&arena_); }
  // Waits for a condition on memory a peer (a communicator rank) writes, bounded like a receive.
  template <class Ready>
  WaitUntil<Ready> wait_until(int peer, size_t bytes, Ready ready) {
    return WaitUntil<Ready>(*this, group_->endpoints[peer], bytes, std::move(ready));
  }
  // Where this operation's coroutine frames and lists live (task.h).
  OpArena& arena() { return arena_; }
  std::byte* scratch(int index, size_t bytes) { return scratch_.get(index, bytes); }
  // An algorithm built from others (all-reduce = reduce-scatter + all-gather) starts a new phase
  // before each part, so a fast neighbour's next part never matches this rank's current one.
  void next_phase() { phase_ += 1u << 28; }
  const ErrorContext& context() const { return ctx_; }

  // The operation's entry in the flight recorder (0: not recorded); start and finish update it.
  void set_flight_id(uint64_t id) { flight_id_ = id; }

  // --- used by the progress engine ---
  void set_task(Task task) { task_ = std::move(task); }
  Task& task() { return task_; }
  Transport& transport() { return transport_; }
  bool started() const { return started_; }
  void start(Clock::time_point now);
  // True when the coroutine should run again: never started, or everything it waits for settled.
  bool runnable() const;
  void resume();
  Clock::time_point deadline() const { return deadline_; }
  Clock::duration timeout() const { return timeout_; }
  // The first request still pending, for timeout and liveness messages; null if none.
  const Request* first_pending() const;
  // Withdraws every request this op still has in the transport.
  void cancel_pending();

  // --- completion, visible to Work ---
  void finish(std::exception_ptr error);
  State state() const { return state_.load(std::memory_order_acquire); }
  // Blocks until finished or `timeout` passed; returns whether it finished.
  bool wait_finished(Clock::duration timeout);
  // Valid once state() is kFailed.
  const Failure& failure() const { return failure_; }
  // When the engine started running it (after the operations queued before it) and when it finished;
  // both valid once state() is not kPending. They feed the runtime's communication trace.
  Clock::time_point started_at() const { return started_at_; }
  Clock::time_point finished_at() const { return finished_at_; }

 private:
  friend class WaitAll;
  template <class Ready>
  friend class WaitUntil;
  RequestPtr track(RequestPtr request);
  Tag tag(uint32_t slot) const { return Tag{group_->context, (ctx_.seq << 32) | (phase_ + slot)}; }
  // A WaitUntil suspends: runnable once test(ready) holds; a request that never completes stands for
  // the wait in timeout and peer-loss reports.
  void suspend_until(std::coroutine_handle<> h, int peer, size_t bytes, bool (*test)(const void*), const void* ready);

  OpArena arena_;  // first: outlives the coroutine frames (task_) carved from it
  ErrorContext ctx_;
  Transport& transport_;
  const GroupView* group_ = nullptr;
  ScratchPool& scratch_;
  size_t chunk_bytes_ = 0;
  Clock::duration timeout_{};
  Clock::time_point deadline_{};
  Clock::time_point started_at_{};
  Clock::time_point finished_at_{};
  bool started_ = false;
  uint32_t phase_ = 0;
  uint64_t flight_id_ = 0;

  Task task_;
  std::coroutine_handle<> resume_point_;
  std::vector<RequestPtr> waiting_;
  struct ReadyWhen {
    bool (*test)(const void*) = nullptr;
    const void* ready = nullptr;
    bool set() const { return test != nullptr; }
    bool operator()() const { return test(ready); }
  } ready_when_;  // set while a WaitUntil suspends
  RequestPtr stand_in_;  // the request a WaitUntil's wait shows as pending (made once per Op)
  std::vector<RequestPtr> posted_;

  std::atomic<State> state_{State::kPending};
  Failure failure_;
  std::mutex mu_;
  std::condition_variable cv_;
};

using OpPtr = std::shared_ptr<Op>;

template <class Ready>
void WaitUntil<Ready>::await_suspend(std::coroutine_handle<> h) {
  op_.suspend_until(h, peer_, bytes_, [](const void* ready) { return (*static_cast<const Ready*>(ready))(); }, &ready_);
}

}  // namespace fsdp
