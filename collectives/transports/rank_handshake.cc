#include "collectives/transports/rank_handshake.h"

#include <algorithm>
#include <cstring>

#include "collectives/transports/message_header.h"  // magic_text

namespace fsdp {

RankHello make_rank_hello(uint64_t magic, uint32_t version, int from_rank, int to_rank, int size, int connection,
                          int connections, std::string_view nonce) {
  RankHello h{magic, version, from_rank, to_rank, size, connection, connections, {}, {}};
  std::memcpy(h.nonce, nonce.data(), std::min(nonce.size(), sizeof(h.nonce)));
  return h;
}

std::string hello_transcript(RankHello hello, RankHello reply) {
  std::memset(hello.proof, 0, sizeof(hello.proof));
  std::memset(reply.proof, 0, sizeof(reply.proof));
  std::string out(reinterpret_cast<const char*>(&hello), sizeof(hello));
  out.append(reinterpret_cast<const char*>(&reply), sizeof(reply));
  return out;
}

std::string check_hello_wire(const RankHello& h, uint64_t magic, uint32_t version, std::string_view transport) {
  if (h.magic != magic) {
    return "opened with " + magic_text(h.magic) + " instead of the fsdp " + std::string(transport) +
           " handshake (not an fsdp rank? a port scanner?)";
  }
  if (h.version != version) {
    return "speaks protocol version " + std::to_string(h.version) + ", this rank " + std::to_string(version);
  }
  return {};
}

std::string check_rank_hello(const RankHello& h, int rank, int size, int connections_per_peer, bool accepted) {
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

std::string secret_mismatch_hint(bool have_secret) {
  return have_secret ? "FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE differs between the two ranks, or the peer has none"
                     : "this rank has no job secret while the peer has one (set the same FSDP_JOB_SECRET or "
                       "FSDP_JOB_SECRET_FILE on every rank)";
}

}  // namespace fsdp
