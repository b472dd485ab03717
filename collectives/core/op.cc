#include "collectives/core/op.h"

#include <algorithm>
#include <thread>

#include "collectives/core/flight_recorder.h"

namespace fsdp {

std::byte* ScratchPool::get(int index, size_t bytes) {
  if (static_cast<size_t>(index) >= buffers_.size()) buffers_.resize(index + 1);
  Buffer& b = buffers_[index];
  if (b.bytes < bytes) {
    b.data = std::make_unique_for_overwrite<std::byte[]>(bytes);
    b.bytes = bytes;
  }
  return b.data.get();
}

bool WaitAll::await_ready() const {
  return std::none_of(requests_.begin(), requests_.end(), [](const RequestPtr& r) { return r->pending(); });
}

void WaitAll::await_suspend(std::coroutine_handle<> h) {
  op_.waiting_.assign(requests_.begin(), requests_.end());
  op_.resume_point_ = h;
}

void WaitAll::await_resume() const {
  for (const RequestPtr& r : requests_) {
    if (!r->failed()) continue;
    ErrorContext ctx = op_.ctx_;
    ctx.peer = r->peer();
    ctx.bytes = r->bytes();
    std::string what = std::string(r->is_send() ? "send" : "receive") + " failed: " + r->error();
    if (r->peer_lost()) throw PeerLostError(ctx, what + other_lost_peers(op_.transport_, r->peer()));
    throw CommError(ctx, what);
  }
}

WaitAll Op::wait(RequestPtr a) {
  RequestList list(&arena_);
  list.push_back(std::move(a));
  return WaitAll(*this, std::move(list));
}

WaitAll Op::wait(RequestPtr a, RequestPtr b) {
  RequestList list(&arena_);
  list.reserve(2);
  list.push_back(std::move(a));
  list.push_back(std::move(b));
  return WaitAll(*this, std::move(list));
}

WaitAll Op::wait(const std::vector<RequestPtr>& requests) {
  return WaitAll(*this, RequestList(requests.begin(), requests.end(), &arena_));
}

void Op::suspend_until(std::coroutine_handle<> h, int peer, size_t bytes, bool (*test)(const void*), const void* ready) {
  if (!stand_in_ || stand_in_.use_count() > 1) stand_in_ = std::make_shared<Request>(peer, bytes, false);
  stand_in_->rearm(peer, bytes, false);
  waiting_.assign(1, stand_in_);
  ready_when_ = ReadyWhen{test, ready};
  resume_point_ = h;
}

Op::Op(Transport& transport, ScratchPool& scratch) : transport_(transport), scratch_(scratch) {}

void Op::begin(ErrorContext ctx, const GroupView& group, size_t chunk_bytes, Clock::duration timeout) {
  ctx_ = std::move(ctx);
  group_ = &group;
  chunk_bytes_ = chunk_bytes;
  timeout_ = timeout;
}

void Op::recycle() {
  task_ = Task();  // the coroutine frames, before the arena they live in is reset
  resume_point_ = {};
  waiting_.clear();
  posted_.clear();
  ready_when_ = {};
  arena_.reset();
  ctx_ = ErrorContext{};
  deadline_ = started_at_ = finished_at_ = Clock::time_point{};
  started_ = false;
  phase_ = 0;
  flight_id_ = 0;
  failure_ = Failure{};
  state_.store(State::kPending, std::memory_order_relaxed);
}

RequestPtr Op::track(RequestPtr request) {
  // Keep the list short: settled requests need no cancelling.
  if (posted_.size() >= 64) {
    std::erase_if(posted_, [](const RequestPtr& r) { return !r->pending(); });
  }
  posted_.push_back(request);
  return request;
}

RequestPtr Op::send(int peer, uint32_t slot, const void* data, size_t bytes) {
  return track(transport_.isend(group_->endpoints[peer], tag(slot), data, bytes));
}

RequestPtr Op::recv(int peer, uint32_t slot, void* data, size_t bytes) {
  return track(transport_.irecv(group_->endpoints[peer], tag(slot), data, bytes));
}

void Op::start(Clock::time_point now) {
  started_ = true;
  started_at_ = now;
  deadline_ = now + timeout_;
  resume_point_ = task_.handle();
  FlightRecorder::instance().started(flight_id_);
}

bool Op::runnable() const {
  if (!started_) return true;
  if (ready_when_.set()) return ready_when_();
  return std::none_of(waiting_.begin(), waiting_.end(), [](const RequestPtr& r) { return r->pending(); });
}

void Op::resume() {
  waiting_.clear();
  ready_when_ = {};
  auto h = std::exchange(resume_point_, {});
  h.resume();
}

const Request* Op::first_pending() const {
  for (const RequestPtr& r : waiting_) {
    if (r->pending()) return r.get();
  }
  for (const RequestPtr& r : posted_) {
    if (r->pending()) return r.get();
  }
  return nullptr;
}

void Op::cancel_pending() {
  for (const RequestPtr& r : posted_) {
    if (r->pending()) transport_.cancel(r);
  }
  posted_.clear();
  waiting_.clear();
  ready_when_ = {};
}

void Op::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    finished_at_ = Clock::now();
    if (!started_) started_at_ = finished_at_;  // failed before it ran (aborted in the queue)
    if (error) failure_ = to_failure(error);
    state_.store(error ? State::kFailed : State::kDone, std::memory_order_release);
  }
  // Before waking the waiters: a failure's dump is on disk when the caller sees the error.
  FlightRecorder::instance().finished(flight_id_, error ? &failure_ : nullptr);
  cv_.notify_all();
}

bool Op::wait_finished(Clock::duration timeout) {
  // A short spin catches small, fast operations without a futex round trip. No yielding: with many
  // waiting ranks on few cores, yields would steal the progress engine's time.
  for (int i = 0; i < 100; ++i) {
    if (state() != State::kPending) return true;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return state() != State::kPending; });
}

}  // namespace fsdp
