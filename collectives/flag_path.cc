#include "collectives/flag_path.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "collectives/algorithms/window_reduce.h"
#include "collectives/core/flight_recorder.h"
#include "collectives/core/op.h"
#include "collectives/core/progress_engine.h"
#include "collectives/transports/transport.h"
#include "collectives/work.h"

namespace fsdp {
namespace {

using Clock = std::chrono::steady_clock;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// A peer a little behind is met by spinning (the latency this path exists for); one far behind by
// yielding, then by naps that grow to kMaxNap, so a waiting rank never takes the core its peer needs
// for long. Deadline, abort and the peer's liveness are checked every kCheckEvery rounds.
constexpr int kSpinRounds = 4000;
constexpr int kSpinRoundsOversubscribed = 64;
constexpr int kYieldRounds = 2000;
constexpr int kCheckEvery = 256;
constexpr auto kMinNap = std::chrono::microseconds(20);
constexpr auto kMaxNap = std::chrono::microseconds(320);
constexpr auto kLivenessPeriod = std::chrono::milliseconds(10);
// After this long on a live peer, every endpoint of the world is looked at (first_lost_endpoint), as the
// engine does: the peer may have stopped on a loss in another group split from the same world.
constexpr auto kOthersCheckAfter = std::chrono::seconds(1);

long long to_ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

}  // namespace

FlagSegment::FlagSegment(Mapping mapping, std::shared_ptr<Transport> transport, std::vector<int> endpoints, int rank)
    : mapping_(std::move(mapping)),
      slots_(reinterpret_cast<FlagSlot*>(mapping_.data())),
      transport_(std::move(transport)),
      endpoints_(std::move(endpoints)),
      rank_(rank),
      oversubscribed_(endpoints_.size() > std::max(1u, std::thread::hardware_concurrency())) {}

void FlagSegment::publish(uint64_t parity, const Fingerprint& call, size_t bytes, const void* payload) {
  FlagSlot& mine = slot(rank_, parity);
  mine.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  mine.fingerprint = call;
  mine.bytes = bytes;
  if (bytes > 0) std::memcpy(mine.payload, payload, bytes);
  mine.seq.store(call.seq + 1, std::memory_order_release);
}

FlagSegment::PeerCall FlagSegment::peer_call(int p, uint64_t parity, uint64_t seq, Fingerprint& call) const {
  const FlagSlot& theirs = slot(p, parity);
  const uint64_t seen = theirs.seq.load(std::memory_order_acquire);
  if (seen == 0 || seen < seq + 1) return PeerCall::kNotYet;  // 0: being written
  if (seen > seq + 1) return PeerCall::kPassed;
  call = theirs.fingerprint;
  std::atomic_thread_fence(std::memory_order_acquire);
  return theirs.seq.load(std::memory_order_relaxed) == seen ? PeerCall::kMade : PeerCall::kPassed;
}

Fingerprint FlagOp::Call::fingerprint(uint64_t seq) const {
  const bool reduces =
      kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kReduce;
  return Fingerprint::of(kind, seq, count, kind == CollectiveKind::kBarrier ? -1 : static_cast<int>(type), root,
                         reduces ? static_cast<int>(reduce.kind) : -1);
}

void FlagSegment::break_with(const std::string& why, bool aborted) {
  std::function<void(const std::string&)> on_break;
  {
    std::lock_guard lock(mu_);
    if (broken_.load(std::memory_order_relaxed)) return;
    why_ = why;
    aborted_ = aborted;
    broken_.store(true, std::memory_order_release);
    on_break = on_break_;
  }
  if (on_break) on_break(why);
}

std::string FlagSegment::broken_reason() const {
  std::lock_guard lock(mu_);
  return why_;
}

bool FlagSegment::aborted() const {
  std::lock_guard lock(mu_);
  return aborted_;
}

void FlagSegment::set_on_break(std::function<void(const std::string&)> f) {
  std::lock_guard lock(mu_);
  on_break_ = std::move(f);
}

void FlagOp::post(std::shared_ptr<FlagSegment> segment, const Call& call, uint64_t seq, uint64_t parity,
                  std::chrono::milliseconds timeout, uint64_t comm_context, std::shared_ptr<Op> prior,
                  std::weak_ptr<ProgressEngine> engine) {
  segment_ = std::move(segment);
  call_ = call;
  seq_ = seq;
  parity_ = parity;
  timeout_ = timeout;
  started_at_ = Clock::now();
  finished_at_ = {};
  deadline_ = started_at_ + timeout;
  prior_ = std::move(prior);
  engine_ = std::move(engine);
  next_peer_ = 0;
  failure_ = Failure{};
  state_.store(State::kPending, std::memory_order_relaxed);
  ctx_.rank = segment_->transport().rank();
  ctx_.peer = -1;
  ctx_.op = name(call.kind);
  ctx_.seq = seq;
  ctx_.bytes = call.post_bytes;
  const int n = segment_->size();
  flight_id_ = FlightRecorder::instance().started_now(call.kind, ctx_, comm_context, segment_->rank(), n, started_at_);

  if (segment_->broken()) {
    fail(std::make_exception_ptr(
        AbortedError(ctx_, "communicator is broken by an earlier error: " + segment_->broken_reason())));
    return;
  }
  if (prior_ && prior_->state() == Op::State::kFailed) {
    fail(std::make_exception_ptr(
        AbortedError(ctx_, "communicator is broken by an earlier error: " + prior_->failure().detail)));
    return;
  }
  const Fingerprint mine = call_.fingerprint(seq_);
  if (mine.reduce >= 0) plan_ = ReductionPlan(call_.type, call_.reduce);
  segment_->publish(parity_, mine, call_.post_bytes, call_.send);
}

void FlagOp::fail_unposted(const std::exception_ptr& error, ErrorContext ctx, const std::string& why) {
  failure_ = to_failure(error);
  failure_.detail = why + failure_.detail;
  ctx.peer = failure_.ctx.peer;
  failure_.ctx = std::move(ctx);
  started_at_ = finished_at_ = Clock::now();
  state_.store(State::kFailed, std::memory_order_release);
}

bool FlagOp::test() {
  if (!settled()) {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;  // another thread is completing it
    if (!advance(false, Clock::time_point::max())) return false;
  }
  rethrow_if_failed();
  return true;
}

void FlagOp::wait(Clock::time_point give_up) {
  if (!settled()) {
    std::lock_guard lock(mu_);
    if (!advance(true, give_up)) {
      throw TimeoutError(ctx_, "wait() gave up after " + std::to_string(to_ms(give_up - started_at_)) +
                                   " ms; the operation is still in flight");
    }
  }
  rethrow_if_failed();
}

void FlagOp::rethrow_if_failed() const {
  if (state_.load(std::memory_order_acquire) == State::kFailed) throw_failure(failure_);
}

bool FlagOp::advance(bool block, Clock::time_point give_up) {
  if (settled()) return true;
  try {
    if (prior_) {
      // The engine operations given before this one complete first (call order).
      if (prior_->state() == Op::State::kPending) {
        if (!block) return false;
        try {
          Work(prior_, engine_).wait();
        } catch (const CommError&) {
        }
      }
      if (prior_->state() == Op::State::kFailed) {
        throw AbortedError(ctx_, "communicator is broken by an earlier error: " + prior_->failure().detail);
      }
      prior_.reset();
    }
    const int n = segment_->size();
    for (; next_peer_ < n; ++next_peer_) {
      if (next_peer_ == segment_->rank()) continue;
      if (!peer_posted(next_peer_, block, give_up)) return false;
    }
    const Fingerprint& mine = segment_->slot(segment_->rank(), parity_).fingerprint;
    for (int p = 0; p < n; ++p) {
      const Fingerprint& theirs = segment_->slot(p, parity_).fingerprint;
      if (theirs == mine) continue;
      ErrorContext ctx = ctx_;
      ctx.peer = segment_->endpoint(p);
      throw MismatchError(ctx, "collective mismatch: rank " + std::to_string(segment_->rank()) + " called " +
                                   describe(mine) + " but rank " + std::to_string(p) + " called " + describe(theirs));
    }
    compute();
  } catch (...) {
    fail(std::current_exception());
    return true;
  }
  finished_at_ = Clock::now();
  FlightRecorder::instance().finished(flight_id_, nullptr, finished_at_);
  state_.store(State::kDone, std::memory_order_release);
  return true;
}

bool FlagOp::peer_posted(int p, bool block, Clock::time_point give_up) {
  const FlagSlot& slot = segment_->slot(p, parity_);
  const uint64_t want = seq_ + 1;
  // A later number here: the peer gave this sequence number to the engine (another kind, or a count
  // above the limit) and went on; its mark was overwritten before this rank looked.
  auto posted = [&] {
    const uint64_t seen = slot.seq.load(std::memory_order_acquire);
    if (seen <= want) return seen == want;
    ErrorContext ctx = ctx_;
    ctx.peer = segment_->endpoint(p);
    throw MismatchError(ctx, "collective mismatch: rank " + std::to_string(segment_->rank()) + " called " +
                                 describe(segment_->slot(segment_->rank(), parity_).fingerprint) + " but rank " +
                                 std::to_string(p) + " gave seq " + std::to_string(seq_) +
                                 " to the engine (another collective, or a count above the flag path's limit)");
  };
  if (posted()) return true;
  if (!block) {
    if (segment_->broken()) throw AbortedError(ctx_, segment_->broken_reason());
    return false;
  }
  const int spin = segment_->oversubscribed() ? kSpinRoundsOversubscribed : kSpinRounds;
  auto nap = kMinNap;
  auto next_liveness = Clock::now() + kLivenessPeriod;
  const auto check_others_from = Clock::now() + kOthersCheckAfter;
  for (int round = 1;; ++round) {
    if (posted()) return true;
    if (round < spin) {
      cpu_relax();
    } else if (round < spin + kYieldRounds) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, kMaxNap);
    }
    if (round % kCheckEvery != 0 && round < spin + kYieldRounds) continue;
    if (segment_->broken()) {
      ErrorContext ctx = ctx_;
      ctx.peer = segment_->endpoint(p);
      throw AbortedError(ctx, segment_->broken_reason());
    }
    const auto now = Clock::now();
    if (now >= next_liveness) {
      next_liveness = now + kLivenessPeriod;
      int lost = segment_->endpoint(p);
      std::string why = segment_->transport().lost_reason(lost);
      if (why.empty() && now >= check_others_from) lost = first_lost_endpoint(segment_->transport(), why);
      if (!why.empty() && !posted()) {
        ErrorContext ctx = ctx_;
        ctx.peer = lost;
        throw PeerLostError(ctx, why + other_lost_peers(segment_->transport(), lost));
      }
    }
    if (now >= give_up && give_up < deadline_) return false;
    if (now >= deadline_) {
      ErrorContext ctx = ctx_;
      ctx.peer = segment_->endpoint(p);
      throw TimeoutError(ctx, "timed out after " + std::to_string(to_ms(timeout_)) + " ms waiting for peer " +
                                  std::to_string(ctx.peer) + " to post its part (" + std::to_string(call_.post_bytes) +
                                  " bytes) of this operation (the peer never reached it, or is stuck); raise "
                                  "FSDP_TIMEOUT_SEC or CommOptions::timeout if the peer is only slow");
    }
  }
}

void FlagOp::compute() {
  const int n = segment_->size();
  const int me = segment_->rank();
  auto* out = static_cast<std::byte*>(call_.recv);
  auto reduce = [&](size_t offset, size_t count) {
    sources_.resize(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) sources_[p] = segment_->slot(p, parity_).payload + offset;
    scratch_.resize(2 * kWindowReduceChunk * plan_.red.elem());
    reduce_from_windows(out, sources_, count, plan_, scratch_.data(), /*output_read_soon=*/true);
  };
  switch (call_.kind) {
    case CollectiveKind::kAllReduce:
      reduce(0, call_.count);
      break;
    case CollectiveKind::kReduce:
      if (me == call_.root) reduce(0, call_.count);
      break;
    case CollectiveKind::kReduceScatter:
      reduce(static_cast<size_t>(me) * call_.block_bytes, call_.count);
      break;
    case CollectiveKind::kAllGather:
      for (int p = 0; p < n; ++p) {
        std::byte* to = out + static_cast<size_t>(p) * call_.block_bytes;
        const std::byte* from = segment_->slot(p, parity_).payload;
        if (call_.block_bytes > 0 && (p != me || to != call_.send)) std::memcpy(to, from, call_.block_bytes);
      }
      break;
    case CollectiveKind::kBroadcast:
      // The root too copies from its slot: its send buffer was free to change after the call.
      if (call_.block_bytes > 0 && (me != call_.root || out != call_.send)) {
        std::memcpy(out, segment_->slot(call_.root, parity_).payload, call_.block_bytes);
      }
      break;
    case CollectiveKind::kBarrier:
      break;
    default:
      break;  // the communicator posts no other kind here
  }
}

void FlagOp::fail(const std::exception_ptr& error) {
  failure_ = to_failure(error);
  finished_at_ = Clock::now();
  FlightRecorder::instance().finished(flight_id_, &failure_, finished_at_);
  prior_.reset();
  state_.store(State::kFailed, std::memory_order_release);
  // As an engine operation's error breaks its stream: later operations of the communicator fail at
  // once instead of waiting on peers that will not come. An abort broke it already.
  if (failure_.kind != Failure::Kind::kAborted) {
    segment_->transport().note_failure(describe(failure_.ctx, failure_.detail));
    segment_->break_with(describe(failure_.ctx, failure_.detail), false);
  }
}

}  // namespace fsdp
