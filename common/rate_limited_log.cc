#include "common/rate_limited_log.h"

#include <cstdio>

namespace fsdp {

void RateLimitedLog::line(const std::string& prefix, const std::string& text) {
  const auto now = std::chrono::steady_clock::now();
  if (now - window_start_ >= window_) {
    window_start_ = now;
    used_ = 0;
  }
  if (used_ >= burst_) {
    ++suppressed_;
    return;
  }
  ++used_;
  const std::string held =
      suppressed_ == 0 ? "" : " (" + std::to_string(suppressed_) + " similar lines before this one not shown)";
  suppressed_ = 0;
  std::fprintf(stderr, "%s%s%s\n", prefix.c_str(), text.c_str(), held.c_str());
}

}  // namespace fsdp
