// One bound for a whole start-up: connect_world computes it once from the rendezvous timeout and
// hands it down, so every wait of the start-up (the store's connect, each gather, each read of rank
// 0's keys, the transport's connect) takes what is left of it rather than a fresh timeout each: the
// start-up ends within one FSDP_RENDEZVOUS_TIMEOUT_SEC whatever the world size.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

namespace fsdp::launch {

class StartupDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  // `now` is the clock (tests give a fake one); the deadline is now() + total.
  explicit StartupDeadline(std::chrono::milliseconds total, Now now = Clock::now)
      : total_(total), now_(std::move(now)), at_(now_() + total) {}

  std::chrono::milliseconds total() const { return total_; }
  Clock::time_point at() const { return at_; }
  // What is left, never negative (a wait given 0 only looks).
  std::chrono::milliseconds remaining() const {
    return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(at_ - now_()));
  }
  // Why the start-up should stop before its deadline ("": go on), asked between slices of the waits for
  // other ranks' keys (fault tolerance: a rank of the epoch being connected exited). None by default.
  void set_abandon(std::function<std::string()> abandon) { abandon_ = std::move(abandon); }
  bool can_abandon() const { return static_cast<bool>(abandon_); }
  std::string abandoned() const { return abandon_ ? abandon_() : std::string(); }

 private:
  std::chrono::milliseconds total_;
  Now now_;
  Clock::time_point at_;
  std::function<std::string()> abandon_;
};

}  // namespace fsdp::launch
