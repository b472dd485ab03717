#include "collectives/work.h"

#include "collectives/core/op.h"

namespace fsdp {

bool Work::test() const {
  if (!op_) return true;
  switch (op_->state()) {
    case Op::State::kPending:
      return false;
    case Op::State::kFailed:
      throw_failure(op_->failure());  // a fresh exception for this thread
    case Op::State::kDone:
      break;
  }
  return true;
}

void Work::wait() const {
  if (!op_) return;
  // The engine's deadline ends the operation; the margin covers operations queued behind others.
  wait(std::chrono::duration_cast<std::chrono::milliseconds>(op_->timeout() * 2 + std::chrono::seconds(10)));
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!op_) return;
  if (!op_->wait_finished(timeout)) {
    throw TimeoutError(op_->context(), "wait() gave up after " + std::to_string(timeout.count()) +
                                           " ms; the operation is still in flight");
  }
  test();
}

std::chrono::steady_clock::time_point Work::started_at() const {
  return op_ ? op_->started_at() : std::chrono::steady_clock::time_point{};
}

std::chrono::steady_clock::time_point Work::finished_at() const {
  return op_ ? op_->finished_at() : std::chrono::steady_clock::time_point{};
}

}  // namespace fsdp
