#include "collectives/transports/message_header.h"

#include <cstdio>

namespace fsdp {

std::string magic_text(uint64_t magic) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(magic));
  return buf;
}

std::string check_header(const MessageHeader& h, size_t eager_limit) {
  if (h.magic != kMessageMagic) return "bad magic " + magic_text(h.magic);
  switch (static_cast<MessageKind>(h.kind)) {
    case MessageKind::kHello:
    case MessageKind::kClearToSend:
    case MessageKind::kPulled:
      return {};
    case MessageKind::kEager:
      // kMaxMessageBytes too: an eager limit set absurdly high must not let a header ask for 2^64 bytes.
      if (h.bytes > eager_limit || h.bytes > kMaxMessageBytes) {
        return "eager frame of " + std::to_string(h.bytes) + " bytes (limit " + std::to_string(eager_limit) + ")";
      }
      return {};
    case MessageKind::kRequestToSend:
      if (h.bytes <= eager_limit || h.bytes > kMaxMessageBytes) {
        return "request-to-send for " + std::to_string(h.bytes) + " bytes (eager limit " + std::to_string(eager_limit) +
               ")";
      }
      return {};
    case MessageKind::kData:
      if (h.bytes > kMaxMessageBytes || h.aux > kMaxMessageBytes) {
        return "data piece of " + std::to_string(h.bytes) + " bytes at offset " + std::to_string(h.aux);
      }
      return {};
  }
  return "unknown frame kind " + std::to_string(h.kind);
}

std::string malformed_frame_message(int peer, std::string_view transport, const std::string& what) {
  return "malformed frame from rank " + std::to_string(peer) + " over " + std::string(transport) + ": " + what +
         " (a corrupted stream, or not an fsdp peer of this version)";
}

}  // namespace fsdp
