// The UCX job-secret handshake (ucx_handshake.h) as a state machine, with no UCX: ranks pass each
// other's messages by hand, and a stranger's messages are fed in where UCX would hand them over.
#include "collectives/transports/ucx_handshake.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "collectives/types/errors.h"

namespace fsdp::testing {
namespace {

using Message = UcxHandshake::Message;

// Delivers messages between `ranks` (index = rank) until none is left; returns every message sent,
// as (from, message).
std::vector<std::pair<int, Message>> exchange(std::vector<UcxHandshake*> ranks) {
  std::vector<std::pair<int, Message>> queue, all;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (auto& m : ranks[r]->start()) queue.emplace_back(r, std::move(m));
  }
  while (!queue.empty()) {
    auto [from, m] = std::move(queue.front());
    queue.erase(queue.begin());
    all.emplace_back(from, m);
    for (auto& answer : ranks[m.peer]->receive(from, m.bytes.data(), m.bytes.size())) {
      queue.emplace_back(m.peer, std::move(answer));
    }
  }
  return all;
}

RankHello hello_of(int from, int to, int size) {
  return make_rank_hello(kUcxHelloMagic, kUcxVersion, from, to, size, 0, 1, random_bytes(kAuthNonceBytes));
}

TEST(UcxHandshake, RanksWithOneSecretAgreeOnEachDirectionsSession) {
  const std::string secret = random_bytes(32);
  UcxHandshake a(0, 3, secret), b(1, 3, secret), c(2, 3, secret);
  const auto sent = exchange({&a, &b, &c});
  EXPECT_EQ(sent.size(), 9u);  // hello, reply and proof per pair
  for (UcxHandshake* h : {&a, &b, &c}) {
    EXPECT_TRUE(h->done());
    EXPECT_EQ(h->refused(), 0u);
  }
  EXPECT_EQ(a.to_peer(1).key, b.from_peer(0).key);
  EXPECT_EQ(b.to_peer(0).key, a.from_peer(1).key);
  EXPECT_EQ(c.to_peer(0).data_mask, a.from_peer(2).data_mask);
  EXPECT_NE(a.to_peer(1).key, a.from_peer(1).key);  // the directions differ
  EXPECT_NE(a.to_peer(1).key, a.to_peer(2).key);    // and the pairs
  EXPECT_LE(a.to_peer(1).data_mask, kUcxIdMask);
}

// Each rank refuses the other's proof and keeps waiting; the lower rank's refusal names the peer.
TEST(UcxHandshake, DifferentSecretsNeverAuthenticate) {
  UcxHandshake a(0, 2, random_bytes(32)), b(1, 2, random_bytes(32));
  exchange({&a, &b});
  EXPECT_FALSE(a.done());
  EXPECT_FALSE(b.done());
  EXPECT_EQ(a.waiting_for(), "1");
  EXPECT_EQ(a.refused(), 1u);
  EXPECT_NE(a.last_refusal().find("claiming rank 1: a reply that could not prove the job secret"), std::string::npos)
      << a.last_refusal();
}

// A stranger claiming rank 0 at rank 1: a proof made with another secret, a proof right for another
// challenge (recorded from an earlier handshake), and either after rank 0 proved itself. All are
// refused with the rank they claimed, and the real rank 0 still gets in.
TEST(UcxHandshake, ForgedAndReplayedProofsAreRefused) {
  const std::string secret = random_bytes(32);
  // An earlier handshake between the real ranks: its proof is what a recording would hold.
  UcxHandshake old0(0, 2, secret), old1(1, 2, secret);
  const auto earlier = exchange({&old0, &old1});
  ASSERT_EQ(earlier.size(), 3u);
  const std::vector<std::byte> recorded_hello = earlier[0].second.bytes, recorded_proof = earlier[2].second.bytes;

  UcxHandshake a(0, 2, secret), b(1, 2, secret);
  // The stranger's hello is answered (towards the real rank 0) ...
  RankHello forged = hello_of(0, 1, 2);
  EXPECT_EQ(b.receive(0, reinterpret_cast<const std::byte*>(&forged), sizeof(forged)).size(), 1u);
  // ... but no proof it can make counts.
  const Digest wrong = auth_proof(random_bytes(32), kUcxDialLabel, "anything");
  b.receive(0, reinterpret_cast<const std::byte*>(wrong.data()), wrong.size());
  EXPECT_EQ(b.refused(), 1u);
  EXPECT_NE(b.last_refusal().find("claiming rank 0: a wrong proof of the job secret"), std::string::npos)
      << b.last_refusal();
  b.receive(0, recorded_hello.data(), recorded_hello.size());
  b.receive(0, recorded_proof.data(), recorded_proof.size());
  EXPECT_EQ(b.refused(), 2u);
  EXPECT_FALSE(b.authenticated(0));

  exchange({&a, &b});
  EXPECT_TRUE(a.done());
  EXPECT_TRUE(b.done());
  b.receive(0, recorded_proof.data(), recorded_proof.size());
  EXPECT_EQ(b.refused(), 3u);
  EXPECT_NE(b.last_refusal().find("after that rank had proved the job secret"), std::string::npos);
}

// A reply meant for another challenge (the stranger's hello got rank 1 to answer it) reaches rank 0,
// which refuses it and still accepts the real reply.
TEST(UcxHandshake, AReplyToSomeoneElsesHelloIsRefused) {
  const std::string secret = random_bytes(32);
  UcxHandshake a(0, 2, secret), b(1, 2, secret);
  RankHello forged = hello_of(0, 1, 2);
  auto misdirected = b.receive(0, reinterpret_cast<const std::byte*>(&forged), sizeof(forged));
  ASSERT_EQ(misdirected.size(), 1u);
  auto hellos = a.start();
  EXPECT_TRUE(a.receive(1, misdirected[0].bytes.data(), misdirected[0].bytes.size()).empty());
  EXPECT_EQ(a.refused(), 1u);
  auto reply = b.receive(0, hellos[0].bytes.data(), hellos[0].bytes.size());
  auto proof = a.receive(1, reply[0].bytes.data(), reply[0].bytes.size());
  ASSERT_EQ(proof.size(), 1u);
  b.receive(0, proof[0].bytes.data(), proof[0].bytes.size());
  EXPECT_TRUE(a.done());
  EXPECT_TRUE(b.done());
}

// Messages no rank of this job sends: an impossible claimed rank, a proof from a higher rank (a
// reflected proof), a wrong size, another handshake's magic, a hello whose body names another rank.
TEST(UcxHandshake, MalformedMessagesAreRefusedNotErrors) {
  UcxHandshake b(1, 3, random_bytes(32));
  const Digest proof{};
  RankHello h = hello_of(0, 1, 3);
  b.receive(7, reinterpret_cast<const std::byte*>(&h), sizeof(h));
  b.receive(2, reinterpret_cast<const std::byte*>(proof.data()), proof.size());
  b.receive(0, reinterpret_cast<const std::byte*>(&h), 7);
  RankHello other = h;
  other.magic = kUcxInfoMagic;
  b.receive(0, reinterpret_cast<const std::byte*>(&other), sizeof(other));
  b.receive(2, reinterpret_cast<const std::byte*>(&h), sizeof(h));  // tag says 2, hello says 0
  EXPECT_EQ(b.refused(), 5u);
  EXPECT_NE(b.last_refusal().find("claiming rank 2: its hello says rank 0"), std::string::npos) << b.last_refusal();
}

// A peer that proved the secret but belongs to a job of another size is an error of the job, on
// either side of the pair.
TEST(UcxHandshake, AnAuthenticatedPeerOfAnotherJobIsAnError) {
  const std::string secret = random_bytes(32);
  UcxHandshake a(0, 3, secret), b(1, 2, secret);
  auto hellos = a.start();
  auto reply = b.receive(0, hellos[0].bytes.data(), hellos[0].bytes.size());
  try {
    a.receive(1, reply[0].bytes.data(), reply[0].bytes.size());
    ADD_FAILURE() << "rank 0 of 3 accepted a proven reply from rank 1 of 2";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("bad handshake: rank 1 proved the job secret but is rank 1 of a job of 2"),
              std::string::npos)
        << e.what();
  }
  // Rank 1 of 2 sees a proven hello of a 3-rank job's rank 0.
  UcxHandshake c(1, 2, secret);
  RankHello h = hello_of(0, 1, 3);
  auto r = c.receive(0, reinterpret_cast<const std::byte*>(&h), sizeof(h));
  ASSERT_EQ(r.size(), 1u);
  RankHello answer;
  std::memcpy(&answer, r[0].bytes.data(), sizeof(answer));
  const Digest p = auth_proof(secret, kUcxDialLabel, hello_transcript(h, answer));
  EXPECT_THROW(c.receive(0, reinterpret_cast<const std::byte*>(p.data()), p.size()), CommError);
}

}  // namespace
}  // namespace fsdp::testing
