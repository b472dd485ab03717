// What a UCX connection proves before any collective message from it counts, and what every later
// message carries to show it comes from the rank that proved it: a state machine over bytes with no
// UCX in it (ucx.cc moves the bytes; tests drive it directly and speak the protocol with it).
//
// Why more than TCP needs: ucp's tag API does not say which endpoint a message came from. The sender
// writes its rank into the tag, so anyone who reaches a worker's address can claim any rank. Hence,
// with a job secret:
//   1. per ordered pair a < b, the handshake of rank_handshake.h on the handshake tag (kUcxHandshakeId):
//      a -> b hello (nonce_a), b -> a reply (nonce_b, proof with kUcxAcceptLabel), a -> b proof
//      (kUcxDialLabel). b answers through its own endpoint to a's published address, so a forged
//      hello's reply lands at the real a, which refuses it: a stranger never sees a challenge meant
//      for it to answer.
//   2. each direction then has a session key, auth_proof(secret, kUcxSessionLabel, transcript || from
//      || to): its 32 bytes lead every control message (UcxFrame), and its low 40 bits are XORed into
//      every data id in a UCX tag, so a stranger who never saw the pair's traffic can neither inject a
//      control message nor land data in a posted receive (a blind guess of a data id: 1 in 2^40).
// No secret: no handshake, no key in front of control messages, data ids as they are (as before).
// Refused messages are dropped, never handed to the protocol, and logged (rate-limited) with the rank
// they claimed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/transports/process_identity.h"
#include "collectives/transports/rank_handshake.h"
#include "common/hmac_sha256.h"
#include "common/rate_limited_log.h"

namespace fsdp {

// The 64-bit UCX tag (the 128-bit Tag itself travels in the control header, see fabric_transport.h):
//   bit 63      0 = control message, 1 = data
//   bits 62..40 the sending rank (23 bits: up to 8M ranks)
//   bits 39..0  data: the id the receiver chose, XOR the direction's mask; control: kUcxControlId for
//               the protocol's messages, kUcxHandshakeId for the handshake's
inline constexpr uint64_t kUcxDataBit = 1ull << 63;
inline constexpr int kUcxRankShift = 40;
inline constexpr int kUcxMaxRanks = 1 << 23;
inline constexpr uint64_t kUcxIdMask = (1ull << kUcxRankShift) - 1;
inline constexpr uint64_t kUcxControlId = 0;
inline constexpr uint64_t kUcxHandshakeId = 1;
inline uint64_t ucx_control_tag(int from, uint64_t id) { return static_cast<uint64_t>(from) << kUcxRankShift | id; }
inline uint64_t ucx_data_tag(int from, uint64_t id) { return kUcxDataBit | ucx_control_tag(from, id & kUcxIdMask); }
inline int ucx_sender_of(uint64_t tag) { return static_cast<int>((tag >> kUcxRankShift) & (kUcxMaxRanks - 1)); }

// What a rank publishes in front of its worker address.
struct UcxPeerInfo {
  uint64_t magic;
  int32_t rank;
  int32_t size;
  ProcessIdentity process;
  uint64_t address_bytes;
};
inline constexpr uint64_t kUcxInfoMagic = 0x6673647075637831ull;  // "fsdpucx1"

inline constexpr uint64_t kUcxHelloMagic = 0x6673647568736b31ull;  // "fsdphsk1"
inline constexpr uint32_t kUcxVersion = 1;
inline constexpr std::string_view kUcxDialLabel = "fsdp-ucx dial";
inline constexpr std::string_view kUcxAcceptLabel = "fsdp-ucx accept";
inline constexpr std::string_view kUcxSessionLabel = "fsdp-ucx session";
// Bytes of the session key in front of each control message when the job has a secret.
inline constexpr size_t kUcxFrameKeyBytes = sizeof(Digest);

// One direction's session: the key its control messages carry and the mask of its data ids.
struct UcxSession {
  Digest key{};
  uint64_t data_mask = 0;  // 40 bits
};
// The session of messages from `from` to `to` after the handshake `transcript`.
UcxSession ucx_session(std::string_view secret, std::string_view transcript, int from, int to);

class UcxHandshake {
 public:
  struct Message {
    int peer;
    std::vector<std::byte> bytes;  // a RankHello, or a 32-byte proof
  };

  // start() and receive() need a non-empty `secret` (without one the fabric runs no handshake and
  // keeps this only for refuse()).
  UcxHandshake(int rank, int size, std::string secret);

  // The hellos this rank opens with, one to each higher rank.
  std::vector<Message> start();
  // A message that arrived on the handshake tag claiming to come from `claimed` (whatever its tag
  // said). Returns what to send in answer; refusals are counted and logged. Throws CommError when a
  // peer that proved the secret describes another job (size, rank).
  std::vector<Message> receive(int claimed, const std::byte* data, size_t bytes);

  bool done() const { return waiting_ == 0; }
  bool authenticated(int peer) const { return peers_[peer].authenticated; }
  // "1, 3": the peers that have not proved the secret yet.
  std::string waiting_for() const;
  const UcxSession& to_peer(int peer) const { return peers_[peer].to; }
  const UcxSession& from_peer(int peer) const { return peers_[peer].from; }

  // Drops a message claiming `claimed` (also for the fabric's refusals after start-up).
  void refuse(int claimed, const std::string& why);
  size_t refused() const { return refused_; }
  const std::string& last_refusal() const { return last_refusal_; }

 private:
  // A hello from a lower rank this rank answered, until that rank's proof arrives. Several may wait
  // (forged hellos claiming the rank); the real one's proof matches one of them.
  struct Answered {
    RankHello hello;
    std::string transcript;
  };
  struct Peer {
    RankHello hello{};  // ours, to a higher rank
    std::deque<Answered> answered;
    bool authenticated = false;
    UcxSession to, from;
  };

  std::vector<Message> on_hello(int claimed, const RankHello& h);
  std::vector<Message> on_proof(int claimed, const Digest& proof);
  void admit(int peer, const std::string& transcript, const RankHello& theirs, bool accepted);

  int rank_;
  int size_;
  std::string secret_;
  std::vector<Peer> peers_;
  int waiting_;
  RateLimitedLog log_;
  size_t refused_ = 0;
  std::string last_refusal_;
};

}  // namespace fsdp
