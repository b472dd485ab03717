// The one check of a message header that arrived (message_header.h), which the fabric transport runs
// on every control message and tcp on every frame before it reads or allocates for the payload.
#include "collectives/transports/message_header.h"

#include <gtest/gtest.h>

namespace fsdp::testing {
namespace {

constexpr size_t kEagerLimit = 32 * 1024;

TEST(MessageHeader, WellFormedHeadersPass) {
  EXPECT_EQ(check_header(make_header(MessageKind::kHello, Tag{}, kProtocolVersion, 3), kEagerLimit), "");
  EXPECT_EQ(check_header(make_header(MessageKind::kEager, Tag{1, 2}, 0, 1), kEagerLimit), "");
  EXPECT_EQ(check_header(make_header(MessageKind::kEager, Tag{1, 2}, kEagerLimit, 1), kEagerLimit), "");
  EXPECT_EQ(check_header(make_header(MessageKind::kRequestToSend, Tag{1, 2}, kEagerLimit + 1, 1), kEagerLimit), "");
  EXPECT_EQ(check_header(make_header(MessageKind::kClearToSend, Tag{1, 2}, 1 << 20, 1), kEagerLimit), "");
  EXPECT_EQ(check_header(make_header(MessageKind::kData, Tag{}, 1 << 20, 7), kEagerLimit), "");
}

TEST(MessageHeader, PayloadFollowsOnlyEagerAndData) {
  EXPECT_EQ(payload_bytes(make_header(MessageKind::kEager, Tag{}, 100, 1)), 100u);
  EXPECT_EQ(payload_bytes(make_header(MessageKind::kData, Tag{}, 4096, 1)), 4096u);
  EXPECT_EQ(payload_bytes(make_header(MessageKind::kRequestToSend, Tag{}, 1 << 20, 1)), 0u);
  EXPECT_EQ(payload_bytes(make_header(MessageKind::kClearToSend, Tag{}, 1 << 20, 1)), 0u);
}

TEST(MessageHeader, MalformedHeadersSayWhatIsWrong) {
  MessageHeader h = make_header(MessageKind::kEager, Tag{1, 0}, 16, 1);
  h.magic = 0xdeadbeef;
  EXPECT_EQ(check_header(h, kEagerLimit), "bad magic 0xdeadbeef");
  h = make_header(MessageKind::kEager, Tag{1, 0}, 16, 1);
  h.kind = 77;
  EXPECT_EQ(check_header(h, kEagerLimit), "unknown frame kind 77");
  h = make_header(MessageKind::kEager, Tag{1, 0}, 1ull << 50, 1);
  EXPECT_EQ(check_header(h, kEagerLimit), "eager frame of 1125899906842624 bytes (limit 32768)");
  // A request-to-send is for what does not go eager, and never absurdly large.
  EXPECT_NE(check_header(make_header(MessageKind::kRequestToSend, Tag{}, 16, 1), kEagerLimit), "");
  EXPECT_NE(check_header(make_header(MessageKind::kRequestToSend, Tag{}, 1ull << 50, 1), kEagerLimit), "");
  EXPECT_NE(check_header(make_header(MessageKind::kData, Tag{}, 1ull << 50, 1), kEagerLimit), "");
}

// Found by fuzz/message_header.cc (corpus file eager_over_max_message): with an eager limit past
// kMaxMessageBytes an eager header of any size passed, so a peer could make the receiver allocate 2^63.
TEST(MessageHeader, EagerFrameOverTheLargestMessageIsRefusedWhateverTheLimit) {
  const MessageHeader h = make_header(MessageKind::kEager, Tag{}, kMaxMessageBytes + 1, 1);
  EXPECT_EQ(check_header(h, SIZE_MAX), "eager frame of " + std::to_string(kMaxMessageBytes + 1) + " bytes (limit " +
                                           std::to_string(SIZE_MAX) + ")");
}

TEST(MessageHeader, MalformedFrameMessageNamesPeerAndTransport) {
  EXPECT_EQ(malformed_frame_message(3, "tcp connection 1", "bad magic 0x1"),
            "malformed frame from rank 3 over tcp connection 1: bad magic 0x1 (a corrupted stream, or not an fsdp "
            "peer of this version)");
}

}  // namespace
}  // namespace fsdp::testing
