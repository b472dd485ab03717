// libFuzzer target: the 48-byte frame header every fabric message carries (tcp, shm, ucx, mpi), and
// the check a receiver runs on it before acting or allocating (message_header.h). Input: the raw
// header bytes as they come off a socket; the last 8 bytes, when present, pick the eager limit.
#include <cstdint>
#include <cstring>

#include "collectives/transports/message_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdp::MessageHeader h{};
  std::memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
  uint64_t eager_limit = 1 << 16;
  if (size >= sizeof(h) + 8) std::memcpy(&eager_limit, data + sizeof(h), 8);
  const std::string what = fsdp::check_header(h, static_cast<size_t>(eager_limit));
  // A well-formed header never announces a payload past the largest message.
  if (what.empty() && fsdp::payload_bytes(h) > fsdp::kMaxMessageBytes) __builtin_trap();
  if (!what.empty()) (void)fsdp::malformed_frame_message(1, "tcp", what);
  return 0;
}
