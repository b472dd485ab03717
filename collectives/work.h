// The handle of an asynchronous operation. The operation runs on the progress engine; the caller
// overlaps compute with it and waits when it needs the result.
#pragma once

#include <chrono>
#include <memory>

namespace fsdp {

class Op;
class FlagOp;
class ProgressEngine;

class Work {
 public:
  Work() = default;
  // `engine` runs the operation; wait() drives it from the waiting thread (progress_engine.h).
  explicit Work(std::shared_ptr<Op> op, std::weak_ptr<ProgressEngine> engine = {})
      : op_(std::move(op)), engine_(std::move(engine)) {}
  // A small collective on the flag path (collectives/flag_path.h): wait() and test() complete it.
  explicit Work(std::shared_ptr<FlagOp> flag) : flag_(std::move(flag)) {}

  bool valid() const { return op_ || flag_; }
  // True once the operation completed; rethrows its error if it failed. Never blocks.
  bool test() const;
  // Blocks until the operation completes (rethrowing its error). The engine fails any operation that
  // waits on its peers past the communicator's timeout, so this returns within about that long.
  // The waiting thread makes progress itself while anything moves (no wake-up round trip for small
  // operations), then sleeps until the engine thread reports completion.
  void wait() const;
  // As wait(), but throws TimeoutError if the operation has not finished within `timeout`; the
  // operation itself goes on (abort the communicator to stop it).
  void wait(std::chrono::milliseconds timeout) const;

  // When the engine started and finished the operation; meaningful once test() or wait() returned.
  std::chrono::steady_clock::time_point started_at() const;
  std::chrono::steady_clock::time_point finished_at() const;

 private:
  std::shared_ptr<Op> op_;
  std::weak_ptr<ProgressEngine> engine_;
  std::shared_ptr<FlagOp> flag_;
};

}  // namespace fsdp
