#include "launch/job_id.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>

namespace fsdp::launch {

// Drawn afresh from the device on every call (no generator state a fork could copy into two
// processes), mixed with the pid and the clock. Thread-safe: nothing is shared between calls.
std::string random_job_id() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd() ^ (uint64_t(::getpid()) << 16) ^
                     uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace fsdp::launch
