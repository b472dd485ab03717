#include "collectives/transports/tcp_handshake.h"

#include <cstring>

#include "collectives/transports/fabric.h"  // kFabricEagerBytes

namespace fsdp {

std::string tcp_handshake_transcript(TcpHello hello, TcpHello reply) {
  std::memset(hello.proof, 0, sizeof(hello.proof));
  std::memset(reply.proof, 0, sizeof(reply.proof));
  std::string out(reinterpret_cast<const char*>(&hello), sizeof(hello));
  out.append(reinterpret_cast<const char*>(&reply), sizeof(reply));
  return out;
}

std::string check_tcp_wire(const TcpHello& h) {
  if (h.magic != kTcpHelloMagic) {
    return "opened with " + magic_text(h.magic) +
           " instead of the fsdp tcp handshake (not an fsdp rank? a port scanner?)";
  }
  if (h.version != kTcpVersion) {
    return "speaks protocol version " + std::to_string(h.version) + ", this rank " + std::to_string(kTcpVersion);
  }
  return {};
}

std::string check_tcp_hello(const TcpHello& h, int rank, int size, int connections_per_peer, bool accepted) {
  if (h.size != size) {
    return "is rank " + std::to_string(h.from_rank) + " of a job of " + std::to_string(h.size) + " ranks, not " +
           std::to_string(size) + " (two jobs share addresses, or stale addresses?)";
  }
  if (h.to_rank != rank) {
    return "addressed rank " + std::to_string(h.to_rank) + ", but this is rank " + std::to_string(rank) +
           " (stale or shuffled address list?)";
  }
  if (h.from_rank < 0 || h.from_rank >= size || (accepted && h.from_rank >= rank)) {
    return "claims rank " + std::to_string(h.from_rank) + ", but only ranks below " + std::to_string(rank) +
           " connect to rank " + std::to_string(rank);
  }
  if (h.connections != connections_per_peer || h.connection < 0 || h.connection >= h.connections) {
    return "uses connection " + std::to_string(h.connection) + " of " + std::to_string(h.connections) +
           " per peer, this rank " + std::to_string(connections_per_peer) +
           " (TcpOptions::connections_per_peer must agree)";
  }
  return {};
}

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
