// The progress engine: one thread that drives transports and resumes the coroutines of operations in
// flight. Communicators submit operations and return at once; callers overlap compute with
// communication and later wait on the Work handle.
//
// Each communicator owns a Stream. Collectives on one stream run in submission order, like NCCL's
// operations on one CUDA stream; point-to-point operations start at once (so a send and a receive
// posted back to back cannot deadlock each other); streams run concurrently. Several communicators
// (and, in tests, all ranks of an in-process job) can share one engine.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
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

 private:
  void run();
  bool poll(Clock::time_point now);
  bool poll_stream(Stream& s, Clock::time_point now);
  void fail_op(Stream& s, const OpPtr& op, std::exception_ptr error);
  void abort_locked(Stream& s, const std::string& why);
  void drain_inbox();
  std::vector<OpPtr> take_inbox_of(Stream* stream);

  std::mutex mu_;  // the streams and everything reachable from them; held by the engine while polling
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::pair<Transport*, int>> transports_;  // each distinct transport and its stream count

  std::mutex inbox_mu_;  // submissions, so callers never wait behind a long copy
  std::condition_variable inbox_cv_;
  std::vector<std::pair<Stream*, std::pair<OpPtr, bool>>> inbox_;
  bool stop_ = false;
  bool busy_ = false;  // under mu_: any op in flight

  Clock::time_point next_liveness_check_{};
  std::thread thread_;
};

}  // namespace fsdp
