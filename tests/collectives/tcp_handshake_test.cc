// The checks a tcp connection's bytes pass before anything acts on them (tcp_handshake.h): the hello a
// connection opens with, the transcript its proofs cover, and each frame header, as functions of bytes
// (fuzzed by fuzz/tcp_handshake.cc).
#include "collectives/transports/tcp_handshake.h"

#include <gtest/gtest.h>

#include "collectives/transports/fabric.h"

namespace fsdp::testing {
namespace {

// Rank 2 of 4, 2 connections per peer.
TcpHello hello_from(int from_rank, int connection) {
  return TcpHello{kTcpHelloMagic, kTcpVersion, from_rank, 2, 4, connection, 2, {}, {}};
}

TEST(TcpHandshake, HelloFromALowerRankOfThisJobPasses) {
  EXPECT_EQ(check_tcp_wire(hello_from(0, 0)), "");
  EXPECT_EQ(check_rank_hello(hello_from(0, 0), 2, 4, 2, true), "");
  EXPECT_EQ(check_rank_hello(hello_from(1, 1), 2, 4, 2, true), "");
  EXPECT_EQ(check_rank_hello(hello_from(3, 0), 2, 4, 2, false), "");  // a reply from a higher rank
}

TEST(TcpHandshake, ForeignHellosSayWhatDiffers) {
  TcpHello h = hello_from(0, 0);
  h.magic = 0x1234;
  EXPECT_EQ(check_tcp_wire(h), "opened with 0x1234 instead of the fsdp tcp handshake (not an fsdp rank? a port scanner?)");
  h = hello_from(0, 0);
  h.version = 2;
  EXPECT_EQ(check_tcp_wire(h), "speaks protocol version 2, this rank 3");
  h = hello_from(0, 0);
  h.size = 8;
  EXPECT_EQ(check_rank_hello(h, 2, 4, 2, true),
            "is rank 0 of a job of 8 ranks, not 4 (two jobs share addresses, or stale addresses?)");
  EXPECT_EQ(check_rank_hello(hello_from(3, 0), 2, 4, 2, true),
            "claims rank 3, but only ranks below 2 connect to rank 2");
  EXPECT_EQ(check_rank_hello(hello_from(-1, 0), 2, 4, 2, false),
            "claims rank -1, but only ranks below 2 connect to rank 2");
  EXPECT_NE(check_rank_hello(hello_from(0, 2), 2, 4, 2, true), "");
  EXPECT_NE(check_rank_hello(hello_from(0, -1), 2, 4, 2, true), "");
}

// The proofs cover every field of both hellos but not the proofs themselves.
TEST(TcpHandshake, TranscriptCoversBothHellosButNotTheirProofs) {
  TcpHello hello = hello_from(0, 0);
  TcpHello reply = hello_from(0, 0);
  reply.nonce[0] = 7;
  const std::string t = hello_transcript(hello, reply);
  EXPECT_EQ(t.size(), 2 * sizeof(TcpHello));
  reply.proof[5] = 1;
  EXPECT_EQ(hello_transcript(hello, reply), t);
  reply.nonce[0] = 8;
  EXPECT_NE(hello_transcript(hello, reply), t);
}

TEST(TcpHandshake, FramesAreCheckedForTheirConnectionAndTransfer) {
  const MessageHeader eager = make_header(MessageKind::kEager, Tag{1, 2}, 16, 1);
  EXPECT_EQ(check_tcp_frame(eager, 0, std::nullopt), "");
  EXPECT_EQ(check_tcp_frame(eager, 1, std::nullopt), "control frame of kind 2 off connection 0");
  MessageHeader data = make_header(MessageKind::kData, Tag{}, 4096, 9);
  data.aux = 4096;
  EXPECT_EQ(check_tcp_frame(data, 1, 8192), "");
  EXPECT_EQ(check_tcp_frame(data, 1, std::nullopt), "data for unknown transfer 9");
  EXPECT_EQ(check_tcp_frame(data, 1, 8191), "data piece [4096, +4096) outside the 8191-byte message");
  data.aux = ~0ull;  // an offset past the message must not wrap the range check
  EXPECT_NE(check_tcp_frame(data, 1, 8192), "");
  EXPECT_NE(check_tcp_frame(make_header(MessageKind::kEager, Tag{}, kFabricEagerBytes + 1, 1), 0, std::nullopt), "");
}

}  // namespace
}  // namespace fsdp::testing
