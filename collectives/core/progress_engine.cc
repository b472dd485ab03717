#include "collectives/core/progress_engine.h"

#include <algorithm>
#include <sstream>

namespace fsdp {

namespace {
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

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
    what << " waiting for peer " << r->peer() << " to " << (r->is_send() ? "receive" : "send") << " "
         << r->bytes() << " bytes (the peer never reached this operation, or is stuck)";
  }
  what << "; raise FSDP_TIMEOUT_SEC or CommOptions::timeout if the peer is only slow";
  return std::make_exception_ptr(TimeoutError(ctx, what.str()));
}
}  // namespace

class ProgressEngine::Stream {
 public:
  explicit Stream(Transport& t) : transport(t) {}
  Transport& transport;
  std::deque<OpPtr> queued;  // ordered ops not yet started
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
  std::erase_if(streams_, [&](const auto& s) { return s.get() == stream; });
}

void ProgressEngine::submit(Stream* stream, OpPtr op, bool ordered) {
  {
    std::lock_guard lock(inbox_mu_);
    inbox_.push_back({stream, {std::move(op), ordered}});
  }
  inbox_cv_.notify_one();
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
  if (s.broken.empty()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      s.broken = e.what();
    }
  }
}

// Moves submissions into their streams (the engine thread, or the destructor once it stopped). Takes
// the inbox lock, then the engine lock.
void ProgressEngine::drain_inbox() {
  std::vector<std::pair<Stream*, std::pair<OpPtr, bool>>> batch;
  {
    std::lock_guard lock(inbox_mu_);
    batch.swap(inbox_);
  }
  if (batch.empty()) return;
  std::lock_guard lock(mu_);
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
  int idle_rounds = 0;
  for (;;) {
    {
      std::unique_lock lock(inbox_mu_);
      if (stop_) return;
      bool busy;
      {
        std::lock_guard engine_lock(mu_);
        busy = busy_;
      }
      if (!busy && inbox_.empty()) inbox_cv_.wait(lock, [&] { return stop_ || !inbox_.empty(); });
      if (stop_) return;
    }
    drain_inbox();
    bool progressed;
    {
      std::lock_guard lock(mu_);
      progressed = poll(Clock::now());
    }
    // Back off when nothing moves: spin briefly for latency, then yield, then sleep so a rank waiting
    // on a slow peer does not steal the core that peer needs.
    if (progressed) {
      idle_rounds = 0;
    } else if (++idle_rounds < 256) {
      cpu_relax();
    } else if (idle_rounds < 20000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
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
      std::vector<OpPtr> running = s->unordered;
      if (s->head) running.push_back(s->head);
      for (const OpPtr& op : running) {
        const Request* r = op->first_pending();
        if (!r) continue;
        const int peer = r->peer();
        std::string why = s->transport.check_peer(peer);
        if (why.empty()) continue;
        // A peer may finish its part (e.g. a barrier message) and exit before we read it: drain what
        // it left first, and fail only if the op still waits on it.
        s->transport.progress();
        if (op->runnable()) continue;
        ErrorContext ctx = op->context();
        ctx.peer = peer;
        ctx.bytes = r->bytes();
        why += other_lost_peers(s->transport, peer);
        fail_op(*s, op, std::make_exception_ptr(PeerLostError(ctx, why)));  // frees r
        abort_locked(*s, "peer " + std::to_string(peer) + " was lost: " + why);
        progressed = true;
        break;
      }
    }
    busy |= !s->idle();
  }
  busy_ = busy;
  return progressed;
}

// Runs what can run in one stream; returns whether anything moved.
bool ProgressEngine::poll_stream(Stream& s, Clock::time_point now) {
  bool progressed = false;
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
      progressed = true;
      fail_op(s, op, timeout_error(*op));
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
  if (!s.broken.empty() && !s.idle()) abort_locked(s, s.broken);
  return progressed;
}

}  // namespace fsdp
