#include "collectives/transports/tcp_handshake.h"

#include <cstring>

#include "collectives/transports/fabric.h"  // kFabricEagerBytes

namespace fsdp {

std::string check_tcp_wire(const TcpHello& h) { return check_hello_wire(h, kTcpHelloMagic, kTcpVersion, "tcp"); }

std::string check_tcp_frame(const MessageHeader& h, size_t connection, std::optional<uint64_t> transfer_bytes) {
  std::string why = check_header(h, kFabricEagerBytes);
  if (!why.empty()) return why;
  if (!h.is(MessageKind::kData)) {
    if (connection != 0) return "control frame of kind " + std::to_string(h.kind) + " off connection 0";
    return {};
  }
  if (!transfer_bytes) return "data for unknown transfer " + std::to_string(h.id);
  if (h.aux > *transfer_bytes || h.bytes > *transfer_bytes - h.aux) {
    return "data piece [" + std::to_string(h.aux) + ", +" + std::to_string(h.bytes) + ") outside the " +
           std::to_string(*transfer_bytes) + "-byte message";
  }
  return {};
}

}  // namespace fsdp
