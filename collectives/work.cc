#include "collectives/work.h"

#include <algorithm>

#include "collectives/flag_path.h"
#include "collectives/core/op.h"
#include "collectives/core/progress_engine.h"

namespace fsdp {
namespace {
// How long a waiting thread polls without anything moving before it sleeps and leaves the rest to
// the engine thread: long enough to cover a peer a little behind, short enough not to burn a core
// a slow peer may need.
constexpr auto kDriveIdleBudget = std::chrono::microseconds(100);
}  // namespace

bool Work::test() const {
  if (flag_) return flag_->test();
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
  if (flag_) return flag_->wait();
  if (!op_) return;
  // The engine's deadline ends the operation; the margin covers operations queued behind others.
  wait(std::chrono::duration_cast<std::chrono::milliseconds>(op_->timeout() * 2 + std::chrono::seconds(10)));
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (flag_) return flag_->wait(Clock::now() + timeout);
  if (!op_) return;
  const auto deadline = Clock::now() + timeout;
  if (auto engine = engine_.lock(); engine && engine->drive(*op_, kDriveIdleBudget, deadline)) {
    test();
    return;
  }
  const auto left = std::max(Clock::duration::zero(), deadline - Clock::now());
  if (!op_->wait_finished(left)) {
    throw TimeoutError(op_->context(), "wait() gave up after " + std::to_string(timeout.count()) +
                                           " ms; the operation is still in flight");
  }
  test();
}

std::chrono::steady_clock::time_point Work::started_at() const {
  if (flag_) return flag_->started_at();
  return op_ ? op_->started_at() : std::chrono::steady_clock::time_point{};
}

std::chrono::steady_clock::time_point Work::finished_at() const {
  if (flag_) return flag_->finished_at();
  return op_ ? op_->finished_at() : std::chrono::steady_clock::time_point{};
}

}  // namespace fsdp
