// Lines on stderr about peers refused or misbehaving, at most `burst` per `window`: thousands of
// rejected connections (a port scanner, a flood of forged handshakes) print a handful of lines, and
// the count of lines held back rides on the next one let through. Not thread-safe: one per thread
// (the store server's, a transport's connect loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fsdp {

class RateLimitedLog {
 public:
  explicit RateLimitedLog(int burst = 5, std::chrono::seconds window = std::chrono::seconds(10))
      : burst_(burst), window_(window) {}
  // Prints prefix + text (+ the held-back count) unless this window's burst is spent.
  void line(const std::string& prefix, const std::string& text);

 private:
  int burst_;
  std::chrono::seconds window_;
  std::chrono::steady_clock::time_point window_start_{};
  int used_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace fsdp
