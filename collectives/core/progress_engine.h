// The progress engine: one thread that drives transports and resumes the coroutines of operations in
// flight. Communicators submit operations and return at once; callers overlap compute with
// communication and later wait on the Work handle.
//
// Each communicator owns a Stream. Collectives on one stream run in submission order, like NCCL's
// operations on one CUDA stream; point-to-point operations start at once (so a send and a receive
// posted back to back cannot deadlock each other); streams run concurrently. Several communicators
// (and, in tests, all ranks of an in-process job) can share one engine.
//
// Caller-driven progress: a thread waiting on an operation (Work::wait) polls the transport and runs
// the coroutines itself while the engine thread stands aside, so a small operation costs no thread
// hand-off: no futex wake-up to start it, none to report it done, no context switch on a core the
// caller shares with the engine. The engine thread keeps everything moving while nobody waits (the
// overlap FSDP prefetching needs). docs/benchmarks.md has the latency this buys.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "collectives/core/op.h"

namespace fsdp {

class ProgressEngine {
 public:
  class Stream;

  ProgressEngine();
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  Stream* open_stream(Transport& transport);
  // Aborts what the stream still has in flight, then forgets it.
  void close_stream(Stream* stream);

  // Queues an operation (its Task set). Throws CommError if the stream is broken.
  void submit(Stream* stream, OpPtr op, bool ordered);

  // Fails every queued and running operation of the stream with AbortedError and withdraws their
  // requests; when it returns, the engine touches none of their buffers again.
  void abort(Stream* stream, const std::string& why);

  // The calling thread makes progress (every stream of this engine) until `op` finished, or until
  // nothing moved for `idle_budget` or `deadline` passed; returns whether `op` finished. Only
  // engines of one transport are driven this way (a process's own endpoint); with many in-process
  // ranks on one engine, each rank's thread spinning would steal the cores the others need, so
  // there it returns false at once and the caller blocks as before.
  bool drive(const Op& op, Clock::duration idle_budget, Clock::time_point deadline);

  // Polls `transport` once (a closed connection is noticed while nothing waits on it) and returns the
  // index in `endpoints` of the first one it reports lost, and why; {-1, ""} when all look alive.
  // Under the engine lock: never concurrent with the engine's own use of the transport.
  std::pair<int, std::string> find_lost(Transport& transport, std::span<const int> endpoints);

 private:
  void run();
  bool poll(Clock::time_point now);
  bool poll_stream(Stream& s, Clock::time_point now);
  void fail_op(Stream& s, const OpPtr& op, std::exception_ptr error);
  void abort_locked(Stream& s, const std::string& why);
  void drain_inbox();
  void drain_inbox_locked();  // mu_ held
  std::vector<OpPtr> take_inbox_of(Stream* stream);

  std::mutex mu_;  // the streams and everything reachable from them; held by whoever polls
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::pair<Transport*, int>> transports_;  // each distinct transport and its stream count
  std::atomic<bool> drivable_{false};                  // exactly one transport (see drive)

  // Lock order: mu_ before inbox_mu_ (a driving caller drains the inbox while polling).
  std::mutex inbox_mu_;  // submissions, so callers never wait behind a long copy
  std::condition_variable inbox_cv_;
  using Submission = std::pair<Stream*, std::pair<OpPtr, bool>>;  // (stream, (op, ordered))
  std::vector<Submission> inbox_;
  std::vector<Submission> draining_;  // under mu_: the batch drain_inbox_locked moves into streams
  bool stop_ = false;
  // Under inbox_mu_: the engine sleeps without a timeout (idle for long), so a submission must
  // wake it. While it only naps (recently active), small submissions skip the wake-up: a waiting
  // caller drives them, or the engine finds them when the nap ends.
  bool deep_sleep_ = false;
  // Under inbox_mu_: a small submission (one that may skip its wake-up) came since the engine last
  // went idle; more tend to follow. Only then does the engine nap before sleeping: after large
  // operations alone (an FSDP step's all-gathers and reduce-scatters, which wake it anyway) naps only
  // take the caller's core, a wake-up and two context switches every kNap (144 -> 42 per step).
  bool small_submitted_ = false;
  std::atomic<bool> busy_{false};  // any op in flight (written under mu_)
  std::atomic<int> drivers_{0};    // callers inside drive(): the engine thread stands aside

  Clock::time_point next_liveness_check_{};
  std::vector<OpPtr> liveness_ops_;  // under mu_: the ops a liveness check looks at (kept for its capacity)
  std::thread thread_;
};

}  // namespace fsdp
