#include "collectives/core/progress_engine.h"

#include <algorithm>
#include <sstream>
#include <thread>

namespace fsdp {

namespace {
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
// A collective that has waited this long on live peers also looks at every other endpoint of its world
// (first_lost_endpoint): one of them lost (dead, or declared frozen) means the peers it waits on have
// stopped too, in this group or another split from the same world, and it would otherwise wait for the
// whole timeout. Not at once: a /proc read per endpoint per check costs nothing only rarely.
constexpr auto kMembersCheckAfter = std::chrono::seconds(1);
// An idle engine naps this long at a time (a submission that skipped the wake-up waits at most
// this), for kNapPhase after its last work if that included small submissions, then sleeps until woken.
constexpr auto kNap = std::chrono::microseconds(200);
constexpr auto kNapPhase = std::chrono::milliseconds(2);
// Operations this large wake the engine at once: the caller usually computes while they run.
constexpr size_t kUrgentBytes = 64 * 1024;
// A driving caller's polls without progress before it starts yielding its core (about 5 us).
constexpr unsigned kSpinsBeforeYield = 128;
// An engine with operations in flight but nothing moving sleeps from kMinIdleSleep, doubling up to
// kMaxIdleSleep: a peer that slow costs at most that much extra latency.
constexpr auto kMinIdleSleep = std::chrono::microseconds(20);
constexpr auto kMaxIdleSleep = std::chrono::microseconds(320);

long long to_ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The error for an operation that ran past its deadline, naming what it was still waiting for.
std::exception_ptr timeout_error(const Op& op) {
  ErrorContext ctx = op.context();
  std::ostringstream what;
  what << "timed out after " << to_ms(op.timeout()) << " ms";
  if (const Request* r = op.first_pending()) {
    ctx.peer = r->peer();
    ctx.bytes = r->bytes();
    what << " waiting for peer " << r->peer() << " to " << (r->is_send() ? "receive" : "send") << " " << r->bytes()
         << " bytes (the peer never reached this operation, is stuck, or called another collective or count "
            "here: FSDP_CHECK_COLLECTIVES=1 names both calls)";
  }
  what << "; raise FSDP_TIMEOUT_SEC or CommOptions::timeout if the peer is only slow";
  return std::make_exception_ptr(TimeoutError(ctx, what.str()));
}

// The PeerLostError for `op` when the peer its first pending request waits on is lost, or (with
// `any_endpoint`) any endpoint of the transport is (first_lost_endpoint), else null; `broken` gets
// what the rest of its stream is aborted with. Drains what a lost peer left first (it may finish its
// part, e.g. a barrier message, and exit before we read it): null when the op no longer waits.
std::exception_ptr lost_peer_error(Transport& transport, const Op& op, bool any_endpoint, std::string& broken) {
  const Request* r = op.first_pending();
  if (!r && !any_endpoint) return nullptr;
  int peer = r ? r->peer() : -1;
  std::string why = r ? transport.lost_reason(peer) : "";
  if (why.empty() && any_endpoint) peer = first_lost_endpoint(transport, why);
  if (why.empty()) return nullptr;
  const size_t bytes = r && peer == r->peer() ? r->bytes() : 0;
  transport.progress();
  if (op.runnable()) return nullptr;
  ErrorContext ctx = op.context();
  ctx.peer = peer;
  ctx.bytes = bytes;
  broken = "peer " + std::to_string(peer) + " was lost: " + why;
  return std::make_exception_ptr(PeerLostError(ctx, why + other_lost_peers(transport, peer)));
}

}  // namespace

class ProgressEngine::Stream {
 public:
  explicit Stream(Transport& t) : transport(t) {}
  Transport& transport;
  PooledDeque<OpPtr> queued{pooled<OpPtr>()};  // ordered ops not yet started
  OpPtr head;                // the ordered op running now
  std::vector<OpPtr> unordered;
  std::string broken;  // why, once an error broke the stream

  bool idle() const { return !head && queued.empty() && unordered.empty(); }
};

ProgressEngine::ProgressEngine() : thread_([this] { run(); }) {}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard lock(inbox_mu_);
    stop_ = true;
  }
  inbox_cv_.notify_all();
  thread_.join();
  drain_inbox();
  std::lock_guard lock(mu_);
  for (auto& s : streams_) abort_locked(*s, "the progress engine was destroyed");
}

ProgressEngine::Stream* ProgressEngine::open_stream(Transport& transport) {
  std::lock_guard lock(mu_);
  streams_.push_back(std::make_unique<Stream>(transport));
  auto it = std::find_if(transports_.begin(), transports_.end(), [&](const auto& t) { return t.first == &transport; });
  if (it == transports_.end()) {
    transports_.emplace_back(&transport, 1);
  } else {
    ++it->second;
  }
  drivable_.store(transports_.size() == 1);
  return streams_.back().get();
}

void ProgressEngine::close_stream(Stream* stream) {
  auto mine = take_inbox_of(stream);
  std::lock_guard lock(mu_);
  abort_locked(*stream, "the communicator was destroyed");
  for (auto& op : mine) op->finish(std::make_exception_ptr(AbortedError(op->context(), stream->broken)));
  auto it = std::find_if(transports_.begin(), transports_.end(),
                         [&](const auto& t) { return t.first == &stream->transport; });
  if (it != transports_.end() && --it->second == 0) transports_.erase(it);
  drivable_.store(transports_.size() == 1);
  std::erase_if(streams_, [&](const auto& s) { return s.get() == stream; });
}

void ProgressEngine::submit(Stream* stream, OpPtr op, bool ordered) {
  // A futex wake-up costs more than a small operation itself; skip it while the engine only naps
  // and a waiting caller can drive the operation (see deep_sleep_).
  const bool urgent = op->context().bytes >= kUrgentBytes || !drivable_.load(std::memory_order_relaxed);
  bool wake;
  {
    std::lock_guard lock(inbox_mu_);
    inbox_.push_back({stream, {std::move(op), ordered}});
    wake = urgent || deep_sleep_;
    small_submitted_ |= !urgent;
  }
  if (wake) inbox_cv_.notify_one();
}

bool ProgressEngine::drive(const Op& op, Clock::duration idle_budget, Clock::time_point deadline) {
  if (!drivable_.load(std::memory_order_relaxed)) return false;
  drivers_.fetch_add(1);
  auto last_moved = Clock::now();
  unsigned idle_spins = 0;
  for (unsigned spins = 1; op.state() == Op::State::kPending; ++spins) {
    bool moved = false;
    if (mu_.try_lock()) {
      drain_inbox_locked();
      moved = poll(Clock::now());
      mu_.unlock();
    }
    if (moved) {
      last_moved = Clock::now();
      idle_spins = 0;
      continue;
    }
    // A peer a few microseconds behind is caught by spinning; one that is descheduled (more ranks
    // than cores) needs this core: yield once the wait outlasts the spin.
    if (++idle_spins < kSpinsBeforeYield) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
    if (spins % 64 == 0) {
      const auto now = Clock::now();
      if (now - last_moved > idle_budget || now > deadline) break;
    }
  }
  drivers_.fetch_sub(1);
  if (busy_.load()) {
    // Work is left (this op still waits on a slow peer, or others are in flight): the engine takes
    // over. Under the lock, so the wake-up cannot fall between its check of drivers_ and its nap.
    std::lock_guard lock(inbox_mu_);
    inbox_cv_.notify_one();
  }
  return op.state() != Op::State::kPending;
}

std::pair<int, std::string> ProgressEngine::find_lost(Transport& transport, std::span<const int> endpoints) {
  std::lock_guard lock(mu_);
  transport.progress();
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (endpoints[i] == transport.rank()) continue;
    std::string why = transport.lost_reason(endpoints[i]);
    if (!why.empty()) return {static_cast<int>(i), std::move(why)};
  }
  return {-1, {}};
}

void ProgressEngine::abort(Stream* stream, const std::string& why) {
  auto mine = take_inbox_of(stream);
  std::lock_guard lock(mu_);
  abort_locked(*stream, why);
  for (auto& op : mine) op->finish(std::make_exception_ptr(AbortedError(op->context(), why)));
}

// Only the engine thread moves other streams' submissions out of the inbox: a caller that took them
// could be preempted between emptying the inbox and marking the engine busy, and the engine would go
// to sleep with those operations in nobody's hands (a lost wake-up that hung a job whose other
// communicator was being destroyed). A caller takes only its own stream's submissions.
std::vector<OpPtr> ProgressEngine::take_inbox_of(Stream* stream) {
  std::vector<OpPtr> mine;
  std::lock_guard lock(inbox_mu_);
  std::erase_if(inbox_, [&](auto& entry) {
    if (entry.first != stream) return false;
    mine.push_back(std::move(entry.second.first));
    return true;
  });
  return mine;
}

void ProgressEngine::abort_locked(Stream& s, const std::string& why) {
  if (s.broken.empty()) s.broken = why;
  auto fail = [&](const OpPtr& op) {
    fail_op(s, op, std::make_exception_ptr(AbortedError(op->context(), why)));
  };
  std::vector<OpPtr> all(s.queued.begin(), s.queued.end());
  if (s.head) all.push_back(s.head);
  all.insert(all.end(), s.unordered.begin(), s.unordered.end());
  s.queued.clear();
  s.head.reset();
  s.unordered.clear();
  for (const OpPtr& op : all) fail(op);
}

void ProgressEngine::fail_op(Stream& s, const OpPtr& op, std::exception_ptr error) {
  if (op->state() != Op::State::kPending) return;
  op->cancel_pending();
  op->set_task(Task());  // destroys the coroutine frame and the buffers it held
  op->finish(error);
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    if (s.broken.empty()) s.broken = e.what();
    // A caller's abort is no failure of the peers; anything else (a timeout, a lost peer) is.
    if (!dynamic_cast<const AbortedError*>(&e)) s.transport.note_failure(e.what());
  }
}

// Moves submissions into their streams (the engine thread, or the destructor once it stopped). Takes
// the inbox lock, releases it, then takes the engine lock.
void ProgressEngine::drain_inbox() {
  {
    std::lock_guard lock(inbox_mu_);
    if (inbox_.empty()) return;
  }
  std::lock_guard lock(mu_);
  drain_inbox_locked();
}

void ProgressEngine::drain_inbox_locked() {
  std::vector<Submission>& batch = draining_;  // swapped with the inbox: both keep their capacity
  struct Clear {
    std::vector<Submission>& v;
    ~Clear() { v.clear(); }  // also when a push throws: no moved-from entry goes back to the inbox
  } clear{batch};
  {
    std::lock_guard lock(inbox_mu_);
    batch.swap(inbox_);
  }
  for (auto& [stream, entry] : batch) {
    auto& [op, ordered] = entry;
    if (!stream->broken.empty()) {
      op->finish(std::make_exception_ptr(
          AbortedError(op->context(), "communicator is broken by an earlier error: " + stream->broken)));
      continue;
    }
    if (ordered) {
      stream->queued.push_back(std::move(op));
    } else {
      stream->unordered.push_back(std::move(op));
    }
    busy_ = true;
  }
}

void ProgressEngine::run() {
  {
    // Room for a burst of submissions and checks, taken here: this thread's first heap call picks its
    // malloc arena now, not in the middle of a training step.
    std::lock_guard lock(mu_);
    draining_.reserve(64);
    liveness_ops_.reserve(64);
  }
  int idle_rounds = 0;
  auto idle_sleep = kMinIdleSleep;
  bool idle = false;
  bool nap = false;
  Clock::time_point idle_since{};
  for (;;) {
    {
      std::unique_lock lock(inbox_mu_);
      if (stop_) return;
      if (drivers_.load() > 0) {
        // A waiting caller polls: stand aside. It wakes us if it leaves work behind.
        inbox_cv_.wait_for(lock, kNap);
        continue;
      }
      if (!busy_.load() && inbox_.empty()) {
        const auto now = Clock::now();
        if (!idle) {
          idle = true;
          idle_since = now;
          nap = small_submitted_;  // nothing skipped a wake-up: sleep until the next submission
          small_submitted_ = false;
        }
        // A driving caller may have taken submissions straight from the inbox and left them running
        // (busy_): it wakes us under this lock, so the predicate sees them.
        auto work = [&] { return stop_ || !inbox_.empty() || busy_.load(); };
        if (nap && now - idle_since < kNapPhase) {
          inbox_cv_.wait_for(lock, kNap, work);
        } else {
          deep_sleep_ = true;
          inbox_cv_.wait(lock, work);
          deep_sleep_ = false;
        }
        if (stop_) return;
        if (inbox_.empty() && !busy_.load()) continue;
      }
      idle = false;
    }
    drain_inbox();
    bool progressed;
    {
      std::lock_guard lock(mu_);
      progressed = poll(Clock::now());
    }
    // Back off when nothing moves: spin briefly for latency, yield a little, then sleep, longer the
    // longer nothing moves (up to kMaxIdleSleep), so a rank waiting on a slow peer does not steal the
    // core that peer (or this rank's own compute) needs. Yielding alone is no back-off when ranks
    // outnumber cores: every yielding thread still takes its full share of the CPU.
    if (progressed) {
      idle_rounds = 0;
      idle_sleep = kMinIdleSleep;
    } else if (++idle_rounds < 256) {
      cpu_relax();
    } else if (idle_rounds < 1024) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(idle_sleep);
      idle_sleep = std::min(idle_sleep * 2, kMaxIdleSleep);
    }
  }
}

bool ProgressEngine::poll(Clock::time_point now) {
  bool progressed = false;
  // Drive each transport once, however many streams share it.
  for (auto& [transport, streams] : transports_) progressed |= transport->progress();

  bool check_liveness = now >= next_liveness_check_;
  if (check_liveness) next_liveness_check_ = now + kLivenessPeriod;

  bool busy = false;
  for (auto& s : streams_) {
    progressed |= poll_stream(*s, now);
    if (check_liveness) {
      // A vanished peer fails the op now rather than at its deadline.
      std::vector<OpPtr>& running = liveness_ops_;  // a copy: failing an op changes the stream's lists
      running.assign(s->unordered.begin(), s->unordered.end());
      if (s->head) running.push_back(s->head);
      for (const OpPtr& op : running) {
        if (!op->first_pending()) continue;
        const bool members = op == s->head && now - op->started_at() > kMembersCheckAfter;
        std::string broken;
        std::exception_ptr error = lost_peer_error(s->transport, *op, members, broken);
        if (!error) continue;
        fail_op(*s, op, error);
        abort_locked(*s, broken);
        progressed = true;
        break;
      }
      running.clear();  // keeps no op alive (nor out of its pool) until the next check
    }
    busy |= !s->idle();
  }
  busy_ = busy;
  return progressed;
}

// Runs what can run in one stream; returns whether anything moved.
bool ProgressEngine::poll_stream(Stream& s, Clock::time_point now) {
  bool progressed = false;
  std::string lost;  // set when an op failed on a lost peer: the rest of the stream is aborted with it
  // Returns true when the op is finished (and so leaves the stream).
  auto step = [&](const OpPtr& op) -> bool {
    if (!op->started()) op->start(now);
    if (op->runnable()) {
      progressed = true;
      op->resume();
      if (op->task().done()) {
        std::exception_ptr error = op->task().error();
        if (error) {
          fail_op(s, op, error);
        } else {
          op->set_task(Task());
          op->finish(nullptr);
        }
        return true;
      }
    }
    if (now > op->deadline()) {
      // A lost peer (the one waited on, or any endpoint, as the liveness check would find once it ran)
      // is the cause, not the timeout: an engine kept off the CPU past both the liveness checks and
      // the deadline must not blame a live peer it waits on.
      progressed = true;
      std::exception_ptr error = lost_peer_error(s.transport, *op, true, lost);
      fail_op(s, op, error ? error : timeout_error(*op));
      return true;
    }
    return false;
  };

  std::erase_if(s.unordered, step);
  for (;;) {
    if (!s.head) {
      if (s.queued.empty() || !s.broken.empty()) break;
      s.head = std::move(s.queued.front());
      s.queued.pop_front();
    }
    if (!step(s.head)) break;
    s.head.reset();
  }
  if (!lost.empty() && !s.idle()) abort_locked(s, lost);
  if (!s.broken.empty() && !s.idle()) abort_locked(s, s.broken);
  return progressed;
}

}  // namespace fsdp
