// The handshake two ranks run before one trusts the other's messages, shared by the transports that
// authenticate their own connections (tcp_handshake.h, ucx_handshake.h): a fixed-size hello carrying
// who is speaking to whom and a fresh nonce, the transcript both proofs cover, and the checks of a
// hello's fields. Pure functions of bytes: the transports, their tests and fuzz/ call the same code.
//
//   lower rank -> higher rank  hello: RankHello with the dialer's nonce, proof zero
//   higher -> lower            reply: RankHello with its own nonce and
//                              proof = auth_proof(secret, <accept label>, hello_transcript(hello, reply))
//   lower -> higher            auth_proof(secret, <dial label>, the same transcript)   (32 bytes)
// Both proofs cover both nonces and every field (ranks, size, connection), so neither can be replayed
// on another connection nor reflected (the labels differ per side and transport), and the secret
// never crosses the wire.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/job_secret.h"  // kAuthNonceBytes

namespace fsdp {

// In host byte order (all ranks share one architecture).
struct RankHello {
  uint64_t magic;  // names the transport's handshake ("fsdptcp1", "fsdpucx1")
  uint32_t version;
  int32_t from_rank;
  int32_t to_rank;
  int32_t size;
  int32_t connection;   // index within the pair, 0 .. connections - 1
  int32_t connections;  // connections per pair; both sides must agree
  uint8_t nonce[kAuthNonceBytes];
  uint8_t proof[32];  // the reply only; zero in the dialer's hello
};
static_assert(sizeof(RankHello) == 80);

// A hello with `nonce` (kAuthNonceBytes, fresh from random_bytes for every connection) and a zero proof.
RankHello make_rank_hello(uint64_t magic, uint32_t version, int from_rank, int to_rank, int size, int connection,
                          int connections, std::string_view nonce);

// What both proofs cover: the dialer's hello and the acceptor's reply, each with its proof zeroed.
std::string hello_transcript(RankHello hello, RankHello reply);

// Empty when `h` opens `transport`'s handshake (`magic`) of this `version`; otherwise why not, worded
// to follow "the connection from X " ("opened with 0x1234 instead of the fsdp tcp handshake ...").
// Checked before authentication: what fails here is refused, not an error of the job.
std::string check_hello_wire(const RankHello& h, uint64_t magic, uint32_t version, std::string_view transport);

// Empty when `h`, from a peer that proved the job secret, describes this job: rank `rank` of `size`
// ranks with `connections_per_peer` connections per pair; otherwise why not ("is rank 5 of a job of 8
// ranks, not 4 ..."). `accepted`: `h` opened a connection to this rank, so it must come from a lower
// rank; otherwise it answers one this rank opened.
std::string check_rank_hello(const RankHello& h, int rank, int size, int connections_per_peer, bool accepted);

// Why a peer's proof fails when the job is not attacked: the two ranks hold different secrets.
// `have_secret`: this rank holds one.
std::string secret_mismatch_hint(bool have_secret);

}  // namespace fsdp
