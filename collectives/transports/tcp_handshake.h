// What a tcp connection carries before and between payloads, as checks of bytes with no socket: the
// TcpHello each connection opens with, and the frame header in front of every control message and
// data piece. tcp.cc runs these on what arrives and fuzz/tcp_handshake.cc on what a fuzzer makes, so
// the code under the fuzzer is the code under the job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "collectives/transports/message_header.h"
#include "common/job_secret.h"  // kAuthNonceBytes

namespace fsdp {

// The handshake each connection opens with, in host byte order (all ranks share one architecture):
//   dialer   -> acceptor  TcpHello with the dialer's nonce, proof zero
//   acceptor -> dialer    TcpHello reply with the acceptor's nonce and
//                         proof = auth_proof(secret, kTcpAcceptLabel, tcp_handshake_transcript(hello, reply))
//   dialer   -> acceptor  auth_proof(secret, kTcpDialLabel, the same transcript)   (32 bytes)
// Both proofs cover both nonces and every field, so neither can be replayed on another connection
// nor reflected, and the secret never crosses the wire. Public so tests can speak the protocol.
struct TcpHello {
  uint64_t magic;
  uint32_t version;
  int32_t from_rank;
  int32_t to_rank;
  int32_t size;
  int32_t connection;   // index within the pair, 0 .. connections_per_peer - 1
  int32_t connections;  // connections_per_peer; both sides must agree
  uint8_t nonce[kAuthNonceBytes];
  uint8_t proof[32];  // the acceptor's reply only; zero in the dialer's hello
};
static_assert(sizeof(TcpHello) == 80);
inline constexpr uint64_t kTcpHelloMagic = 0x6673647074637031ull;  // "fsdptcp1"
// 3: the authenticated handshake; 2: the shared fabric protocol over the connections.
inline constexpr uint32_t kTcpVersion = 3;
inline constexpr std::string_view kTcpDialLabel = "fsdp-tcp dial";
inline constexpr std::string_view kTcpAcceptLabel = "fsdp-tcp accept";

// What both proofs cover: the dialer's hello and the acceptor's reply, each with its proof zeroed.
std::string tcp_handshake_transcript(TcpHello hello, TcpHello reply);

// Empty when `h` is a handshake of this transport's version; otherwise why not, worded to follow
// "the connection from X " ("opened with 0x1234 instead of the fsdp tcp handshake ..."). Checked
// before authentication: what fails here is refused, not an error of the job.
std::string check_tcp_wire(const TcpHello& h);

// Empty when `h`, from a peer that proved the job secret, describes this job: rank `rank` of `size`
// ranks with `connections_per_peer` connections per pair; otherwise why not ("is rank 5 of a job of 8
// ranks, not 4 ..."). `accepted`: `h` opened a connection to this rank, so it must come from a lower
// rank; otherwise it answers one this rank opened.
std::string check_tcp_hello(const TcpHello& h, int rank, int size, int connections_per_peer, bool accepted);

// Empty when the frame header `h`, read off connection `connection` of a pair, may be acted on before
// anything more is read for it; otherwise what is wrong. Beyond check_header: control frames travel
// on connection 0 only, and a data piece must lie inside the receive its id names, of
// `transfer_bytes` bytes (nullopt: no receive has that id).
std::string check_tcp_frame(const MessageHeader& h, size_t connection, std::optional<uint64_t> transfer_bytes);

}  // namespace fsdp
