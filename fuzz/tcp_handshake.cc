// libFuzzer target: what a tcp connection of the fabric carries (tcp_handshake.h), as an accepting
// rank reads it: the 80-byte TcpHello a connecting rank opens with (its wire check, the transcript the
// job-secret proofs cover, then its fields, as once the proof passed), then frames (48-byte header,
// then its payload) on the connection the hello named. The receiving job is rank 2 of 4 with 2 connections
// per peer, with receives posted for data ids 1 (4 KiB) and 2 (1 MiB). A malformed hello or frame ends
// the stream, as it fails the peer in tcp.cc. Properties: an accepted hello comes from a lower rank on
// a connection in range; an accepted frame never asks to read past its receive or the eager limit.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "collectives/transports/fabric.h"
#include "collectives/transports/tcp_handshake.h"

namespace {

constexpr int kRank = 2;
constexpr int kSize = 4;
constexpr int kConnections = 2;

std::optional<uint64_t> posted_receive(uint64_t id) {
  if (id == 1) return 4096;
  if (id == 2) return 1 << 20;
  return std::nullopt;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fsdp;
  if (size < sizeof(TcpHello)) return 0;
  TcpHello hello;
  std::memcpy(&hello, data, sizeof(hello));
  data += sizeof(hello);
  size -= sizeof(hello);
  if (!check_tcp_wire(hello).empty()) return 0;  // refused before authentication
  // The proofs cover every byte of both hellos but the proofs themselves.
  TcpHello reply = hello;
  reply.proof[0] ^= 1;
  if (hello_transcript(hello, reply) != hello_transcript(hello, hello)) __builtin_trap();
  // The same bytes as the reply to a connection this rank opened (any peer rank may answer).
  (void)check_rank_hello(hello, kRank, kSize, kConnections, false);
  if (!check_rank_hello(hello, kRank, kSize, kConnections, true).empty()) return 0;
  if (hello.from_rank < 0 || hello.from_rank >= kRank || hello.connection < 0 || hello.connection >= kConnections) {
    __builtin_trap();
  }
  const size_t connection = static_cast<size_t>(hello.connection);
  while (size >= sizeof(MessageHeader)) {
    MessageHeader h;
    std::memcpy(&h, data, sizeof(h));
    data += sizeof(h);
    size -= sizeof(h);
    const std::optional<uint64_t> transfer = h.is(MessageKind::kData) ? posted_receive(h.id) : std::nullopt;
    const std::string why = check_tcp_frame(h, connection, transfer);
    if (!why.empty()) {
      (void)malformed_frame_message(hello.from_rank, "tcp connection " + std::to_string(connection), why);
      return 0;
    }
    const size_t payload = payload_bytes(h);
    if (h.is(MessageKind::kData) ? h.aux + payload > *transfer : payload > kFabricEagerBytes) __builtin_trap();
    if (payload > size) return 0;  // the rest of the payload never arrives
    data += payload;
    size -= payload;
  }
  return 0;
}
