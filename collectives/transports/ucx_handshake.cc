#include "collectives/transports/ucx_handshake.h"

#include <cstring>

#include "collectives/types/errors.h"

namespace fsdp {
namespace {

// Forged hellos claiming one rank that are kept answered at once; more push out the oldest.
constexpr size_t kMaxAnswered = 16;

std::vector<std::byte> bytes_of(const void* p, size_t n) {
  std::vector<std::byte> out(n);
  std::memcpy(out.data(), p, n);
  return out;
}

}  // namespace

UcxSession ucx_session(std::string_view secret, std::string_view transcript, int from, int to) {
  std::string covered(transcript);
  const int32_t ranks[2] = {from, to};
  covered.append(reinterpret_cast<const char*>(ranks), sizeof(ranks));
  UcxSession s;
  s.key = auth_proof(secret, kUcxSessionLabel, covered);
  uint64_t low = 0;
  std::memcpy(&low, s.key.data(), sizeof(low));
  s.data_mask = low & kUcxIdMask;
  return s;
}

UcxHandshake::UcxHandshake(int rank, int size, std::string secret)
    : rank_(rank), size_(size), secret_(std::move(secret)), peers_(size), waiting_(size - 1) {}

std::vector<UcxHandshake::Message> UcxHandshake::start() {
  std::vector<Message> out;
  for (int peer = rank_ + 1; peer < size_; ++peer) {
    peers_[peer].hello =
        make_rank_hello(kUcxHelloMagic, kUcxVersion, rank_, peer, size_, 0, 1, random_bytes(kAuthNonceBytes));
    out.push_back(Message{peer, bytes_of(&peers_[peer].hello, sizeof(RankHello))});
  }
  return out;
}

std::vector<UcxHandshake::Message> UcxHandshake::receive(int claimed, const std::byte* data, size_t bytes) {
  if (claimed < 0 || claimed >= size_ || claimed == rank_) {
    refuse(claimed, "not a peer of rank " + std::to_string(rank_) + " in a job of " + std::to_string(size_) + " ranks");
    return {};
  }
  if (peers_[claimed].authenticated) {
    refuse(claimed, "a handshake message after that rank had proved the job secret (a replay?)");
    return {};
  }
  if (bytes == sizeof(RankHello)) {
    RankHello h;
    std::memcpy(&h, data, sizeof(h));
    return on_hello(claimed, h);
  }
  if (bytes == sizeof(Digest)) {
    Digest proof;
    std::memcpy(proof.data(), data, proof.size());
    return on_proof(claimed, proof);
  }
  refuse(claimed, "a handshake message of " + std::to_string(bytes) + " bytes (a hello is " +
                      std::to_string(sizeof(RankHello)) + ", a proof " + std::to_string(sizeof(Digest)) + ")");
  return {};
}

std::vector<UcxHandshake::Message> UcxHandshake::on_hello(int claimed, const RankHello& h) {
  if (std::string why = check_hello_wire(h, kUcxHelloMagic, kUcxVersion, "ucx"); !why.empty()) {
    refuse(claimed, why);
    return {};
  }
  if (h.from_rank != claimed) {
    refuse(claimed, "its hello says rank " + std::to_string(h.from_rank));
    return {};
  }
  Peer& p = peers_[claimed];
  if (claimed > rank_) {
    // A reply to our hello: it must prove the secret over our challenge, or it answers someone else's.
    Digest theirs;
    std::memcpy(theirs.data(), h.proof, theirs.size());
    const std::string transcript = hello_transcript(p.hello, h);
    if (!equal_constant_time(theirs, auth_proof(secret_, kUcxAcceptLabel, transcript))) {
      refuse(claimed,
             "a reply that could not prove the job secret for this rank's challenge (a forged or "
             "replayed reply, or " +
                 secret_mismatch_hint(true) + ")");
      return {};
    }
    admit(claimed, transcript, h, false);
    const Digest proof = auth_proof(secret_, kUcxDialLabel, transcript);
    return {Message{claimed, bytes_of(proof.data(), proof.size())}};
  }
  // A hello from a lower rank: answer with our challenge and proof; its proof comes next.
  RankHello reply =
      make_rank_hello(kUcxHelloMagic, kUcxVersion, rank_, claimed, size_, 0, 1, random_bytes(kAuthNonceBytes));
  const std::string transcript = hello_transcript(h, reply);
  const Digest proof = auth_proof(secret_, kUcxAcceptLabel, transcript);
  std::memcpy(reply.proof, proof.data(), proof.size());
  if (p.answered.size() == kMaxAnswered) p.answered.pop_front();
  p.answered.push_back(Answered{h, transcript});
  return {Message{claimed, bytes_of(&reply, sizeof(reply))}};
}

std::vector<UcxHandshake::Message> UcxHandshake::on_proof(int claimed, const Digest& proof) {
  Peer& p = peers_[claimed];
  if (claimed > rank_) {
    refuse(claimed, "a proof from a higher rank (they answer this rank's hellos; only lower ranks send proofs)");
    return {};
  }
  if (p.answered.empty()) {
    refuse(claimed, "a proof for a challenge this rank never gave that rank (a replayed proof?)");
    return {};
  }
  for (const Answered& a : p.answered) {
    if (equal_constant_time(proof, auth_proof(secret_, kUcxDialLabel, a.transcript))) {
      const Answered found = a;
      admit(claimed, found.transcript, found.hello, true);
      return {};
    }
  }
  refuse(claimed,
         "a wrong proof of the job secret (a forged or replayed proof, or " + secret_mismatch_hint(true) + ")");
  return {};
}

void UcxHandshake::admit(int peer, const std::string& transcript, const RankHello& theirs, bool accepted) {
  if (std::string why = check_rank_hello(theirs, rank_, size_, 1, accepted); !why.empty()) {
    throw CommError(ErrorContext{rank_, peer, "ucx_connect", 0, 0},
                    "bad handshake: rank " + std::to_string(peer) + " proved the job secret but " + why);
  }
  Peer& p = peers_[peer];
  p.authenticated = true;
  p.answered.clear();
  p.to = ucx_session(secret_, transcript, rank_, peer);
  p.from = ucx_session(secret_, transcript, peer, rank_);
  --waiting_;
}

std::string UcxHandshake::waiting_for() const {
  std::string out;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && !peers_[peer].authenticated) out += (out.empty() ? "" : ", ") + std::to_string(peer);
  }
  return out;
}

void UcxHandshake::refuse(int claimed, const std::string& why) {
  ++refused_;
  last_refusal_ = "claiming rank " + std::to_string(claimed) + ": " + why;
  log_.line("fsdp ucx rank " + std::to_string(rank_) + ": ", "refused a message " + last_refusal_);
}

}  // namespace fsdp
