// One communication operation in flight, and the context its algorithm runs in.
//
// The algorithm (a Task coroutine) posts sends and receives through the Op and `co_await`s them;
// while it waits, the Op records what it waits for and where to resume, and the progress engine
// resumes it once those requests completed, failed, or the deadline passed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/core/errors.h"
#include "collectives/core/task.h"
#include "collectives/transports/transport.h"

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

// Awaitable: resumes the coroutine when every request has left kPending; throws a CommError naming
// the peer of the first failed one.
class WaitAll {
 public:
  WaitAll(Op& op, std::vector<RequestPtr> requests) : op_(op), requests_(std::move(requests)) {}
  bool await_ready() const;
  void await_suspend(std::coroutine_handle<> h);
  void await_resume() const;

 private:
  Op& op_;
  std::vector<RequestPtr> requests_;
};

// Awaitable: resumes the coroutine once `ready()` holds (a flag in shared memory a peer sets). The
// wait stands for a receive of `bytes` from `peer` (an endpoint), so timeouts and the liveness check
// name that peer exactly as they do for a message.
class WaitUntil {
 public:
  WaitUntil(Op& op, int peer, size_t bytes, std::function<bool()> ready)
      : op_(op), peer_(peer), bytes_(bytes), ready_(std::move(ready)) {}
  bool await_ready() const { return ready_(); }
  void await_suspend(std::coroutine_handle<> h);
  void await_resume() const {}

 private:
  Op& op_;
  int peer_;
  size_t bytes_;
  std::function<bool()> ready_;
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

  Op(ErrorContext ctx, Transport& transport, const GroupView& group, ScratchPool& scratch, size_t chunk_bytes,
     Clock::duration timeout);

  // --- used by algorithms ---
  int rank() const { return group_.rank; }
  int size() const { return static_cast<int>(group_.endpoints.size()); }
  size_t chunk_bytes() const { return chunk_bytes_; }
  // `slot` tells apart the transfers of one operation between the same two ranks (step, chunk).
  RequestPtr send(int peer, uint32_t slot, const void* data, size_t bytes);
  RequestPtr recv(int peer, uint32_t slot, void* data, size_t bytes);
  // (Separate overloads, not an initializer list: g++ 12 miscompiles braced lists inside co_await.)
  WaitAll wait(RequestPtr a) { return WaitAll(*this, std::vector<RequestPtr>{std::move(a)}); }
  WaitAll wait(RequestPtr a, RequestPtr b) { return WaitAll(*this, std::vector<RequestPtr>{std::move(a), std::move(b)}); }
  WaitAll wait(std::vector<RequestPtr> requests) { return WaitAll(*this, std::move(requests)); }
  // Waits for a condition on memory a peer (a communicator rank) writes, bounded like a receive.
  WaitUntil wait_until(int peer, size_t bytes, std::function<bool()> ready) {
    return WaitUntil(*this, group_.endpoints[peer], bytes, std::move(ready));
  }
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
  friend class WaitUntil;
  RequestPtr track(RequestPtr request);
  Tag tag(uint32_t slot) const { return Tag{group_.context, (ctx_.seq << 32) | (phase_ + slot)}; }

  ErrorContext ctx_;
  Transport& transport_;
  const GroupView& group_;
  ScratchPool& scratch_;
  size_t chunk_bytes_;
  Clock::duration timeout_;
  Clock::time_point deadline_{};
  Clock::time_point started_at_{};
  Clock::time_point finished_at_{};
  bool started_ = false;
  uint32_t phase_ = 0;
  uint64_t flight_id_ = 0;

  Task task_;
  std::coroutine_handle<> resume_point_;
  std::vector<RequestPtr> waiting_;
  std::function<bool()> ready_when_;  // set while a WaitUntil suspends: runnable once it holds
  std::vector<RequestPtr> posted_;

  std::atomic<State> state_{State::kPending};
  Failure failure_;
  std::mutex mu_;
  std::condition_variable cv_;
};

using OpPtr = std::shared_ptr<Op>;

}  // namespace fsdp
