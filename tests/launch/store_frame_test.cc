// The store's wire format as bytes (store_frame.h) and its keys (store_data.h), with no socket: what
// the server and the client run on every frame and request, and what fuzz/store_frame.cc fuzzes.
#include "launch/store_frame.h"

#include <gtest/gtest.h>

#include "launch/key_value_store.h"
#include "launch/store_data.h"
#include "proto/store.pb.h"

namespace fsdp::launch {
namespace {

using proto::StoreRequest;
using proto::StoreResponse;

StoreRequest request(StoreRequest::Op op, std::vector<std::string> keys) {
  StoreRequest r;
  r.set_op(op);
  for (auto& k : keys) r.add_keys(std::move(k));
  return r;
}

TEST(StoreFrame, LengthPrefixIsLittleEndianAndRoundTrips) {
  EXPECT_EQ(encode_store_length(0x01020304u), (StoreLengthPrefix{4, 3, 2, 1}));
  for (uint32_t size : {0u, 1u, 255u, 256u, kStoreMaxFrameBytes, 0xffffffffu}) {
    EXPECT_EQ(decode_store_length(encode_store_length(size)), size);
  }
  StoreRequest request;
  request.set_op(StoreRequest::OP_SET);
  request.add_keys("k");
  const std::string frame = store_frame_of(request);
  StoreLengthPrefix prefix;
  std::copy_n(frame.begin(), 4, prefix.begin());
  EXPECT_EQ(decode_store_length(prefix), frame.size() - 4);
}

TEST(StoreFrame, OversizedLengthIsRefusedBeforeAnyRead) {
  EXPECT_EQ(check_store_frame_length(kStoreMaxFrameBytes, kStoreMaxFrameBytes), "");
  EXPECT_EQ(check_store_frame_length(kStoreMaxFrameBytes + 1, kStoreMaxFrameBytes),
            "frame of 67108865 bytes exceeds the 67108864-byte bound");
  EXPECT_EQ(check_store_frame_length(kStoreMaxFrameBytes + 1, kStoreMaxReplyBytes), "");
}

// 64 MiB announced and arriving: 4 KiB first, doubling with what arrived, 64 KiB a read at most; the
// buffer never holds more than twice what arrived plus 4 KiB, and never passes the announced size.
TEST(StoreFrame, BodyReadsGrowWithWhatArrivedNotWithTheAnnouncedLength) {
  EXPECT_EQ(store_body_read_size(0, kStoreMaxFrameBytes), 4096u);
  EXPECT_EQ(store_body_read_size(4096, kStoreMaxFrameBytes), 4096u);
  EXPECT_EQ(store_body_read_size(8192, kStoreMaxFrameBytes), 8192u);
  EXPECT_EQ(store_body_read_size(1 << 20, kStoreMaxFrameBytes), 64u << 10);
  EXPECT_EQ(store_body_read_size(10, 12), 2u);
  EXPECT_EQ(store_body_read_size(12, 12), 0u);
  EXPECT_EQ(store_body_read_size(0, 0), 0u);
  size_t have = 0;
  while (const size_t want = store_body_read_size(have, kStoreMaxFrameBytes)) {
    ASSERT_LE(have + want, 2 * have + 4096);
    have += want;
  }
  EXPECT_EQ(have, kStoreMaxFrameBytes);
}

TEST(StoreFrame, MalformedRequestsSayWhy) {
  StoreRequest r;
  EXPECT_EQ(store_request_error(r), "unknown store op 0");
  r.set_op(StoreRequest::OP_NUM_KEYS);
  EXPECT_EQ(store_request_error(r), "");
  r.set_op(StoreRequest::OP_SET);
  EXPECT_EQ(store_request_error(r), "store_set takes exactly one key, got 0");
  r.add_keys("a");
  EXPECT_EQ(store_request_error(r), "");
  r.add_keys("b");
  EXPECT_EQ(store_request_error(r), "store_set takes exactly one key, got 2");
  r.set_op(StoreRequest::OP_WAIT);
  EXPECT_EQ(store_request_error(r), "");
  r.clear_keys();
  EXPECT_EQ(store_request_error(r), "store_wait needs at least one key");
  r.set_op(static_cast<StoreRequest::Op>(42));
  EXPECT_EQ(store_request_error(r), "unknown store op 42");
  EXPECT_STREQ(store_op_name(42), "store_unknown");
}

// What the server does with a request, minus the connection: GET/WAIT park while a key is missing and
// get their answer when applied again; a created key is reported (parked requests may wake); counters
// refuse text and int64 overflow; malformed requests are refused with store_request_error's reason.
TEST(StoreData, RequestsParkCreateAndRefuseAsTheServerAnswersThem) {
  StoreData data;
  StoreResponse r;
  StoreRequest get = request(StoreRequest::OP_GET, {"k"});
  EXPECT_TRUE(data.apply(get, &r).park);
  EXPECT_EQ(data.missing_keys(get), std::vector<std::string>{"k"});
  StoreRequest set = request(StoreRequest::OP_SET, {"k"});
  set.set_value("v");
  EXPECT_TRUE(data.apply(set, &r).created);
  r.Clear();
  EXPECT_FALSE(data.apply(get, &r).park);
  EXPECT_EQ(r.value(), "v");
  StoreRequest add = request(StoreRequest::OP_ADD, {"k"});
  add.set_delta(1);
  r.Clear();
  data.apply(add, &r);
  EXPECT_EQ(r.status(), StoreResponse::STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(r.error(), "store_add on key 'k', which holds 'v', not a decimal int64 counter");
  add.set_keys(0, "n");
  add.set_delta(INT64_MAX);
  r.Clear();
  EXPECT_TRUE(data.apply(add, &r).created);
  EXPECT_EQ(r.number(), INT64_MAX);
  r.Clear();
  data.apply(add, &r);
  EXPECT_EQ(r.error(), "store_add on key 'n' overflows int64: 9223372036854775807 + 9223372036854775807");
  StoreRequest bad = request(StoreRequest::OP_DELETE, {});
  r.Clear();
  EXPECT_FALSE(data.apply(bad, &r).park);
  EXPECT_EQ(r.error(), "store_delete takes exactly one key, got 0");
  EXPECT_EQ(data.size(), 2u);
}

// OP_VOTE (KeyValueStore::vote in one request): each vote is counted once, parked or not; the vote
// that reaches the target writes the decision (unless one is there: an "abort" written first stays),
// creating it so the parked voters wake and read it; a vote needs its two keys.
TEST(StoreData, VoteCountsOnceDecidesAtTheTargetAndParksUntilDecided) {
  StoreData data;
  StoreResponse r;
  const auto vote = [] {
    StoreRequest v = request(StoreRequest::OP_VOTE, {"votes", "decision"});
    v.set_delta(1);
    v.set_target(3);
    v.set_desired("commit");
    return v;
  };
  StoreRequest first = vote(), second = vote(), third = vote();
  EXPECT_TRUE(data.apply(first, &r).park);
  EXPECT_EQ(data.missing_keys(first), std::vector<std::string>{"decision"});
  EXPECT_TRUE(data.apply(first, &r).park);  // applied again while undecided: not counted again
  EXPECT_TRUE(data.apply(second, &r).park);
  r.Clear();
  const StoreData::Outcome last = data.apply(third, &r);
  EXPECT_FALSE(last.park);
  EXPECT_TRUE(last.created);  // the decision: parked voters wake
  EXPECT_EQ(r.value(), "commit");
  for (StoreRequest* parked : {&first, &second}) {
    r.Clear();
    EXPECT_FALSE(data.apply(*parked, &r).park);
    EXPECT_EQ(r.value(), "commit");
  }
  StoreRequest count = request(StoreRequest::OP_ADD, {"votes"});
  r.Clear();
  data.apply(count, &r);
  EXPECT_EQ(r.number(), 3);

  StoreRequest closed = request(StoreRequest::OP_COMPARE_SET, {"decision2"});
  closed.set_desired("abort");
  data.apply(closed, &r);
  StoreRequest late = vote();
  late.set_keys(1, "decision2");
  late.set_target(4);  // the counter reads 4 after it: it would decide, but the abort came first
  r.Clear();
  EXPECT_FALSE(data.apply(late, &r).park);
  EXPECT_EQ(r.value(), "abort");

  for (size_t keys : {1u, 4u}) {
    StoreRequest bad = request(StoreRequest::OP_VOTE, std::vector<std::string>(keys, "votes"));
    r.Clear();
    data.apply(bad, &r);
    EXPECT_EQ(r.status(), StoreResponse::STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(r.error(),
              "store_vote takes two or three keys (the counter, the decision, optionally the snapshot "
              "counter), got " +
                  std::to_string(keys));
  }
}

// OP_VOTE with a snapshot counter (the step commit's grow tickets): the vote that decides writes the
// counter's value at that moment after the value ("commit 2"), the parked voters read that same
// decision though the counter moves on, a missing counter reads 0 and is not created (nor waited on),
// and a snapshot key that is not a counter refuses the vote uncounted.
TEST(StoreData, VoteWithASnapshotCounterWritesItsValueIntoTheDecision) {
  StoreData data;
  StoreResponse r;
  const auto apply = [&](StoreRequest& q) {
    r.Clear();
    return data.apply(q, &r);
  };
  const auto vote = [](const std::string& decision) {
    StoreRequest v = request(StoreRequest::OP_VOTE, {decision + "/votes", decision, "tickets"});
    v.set_delta(1);
    v.set_target(2);
    v.set_desired("commit");
    return v;
  };
  StoreRequest first = vote("s1"), second = vote("s1");
  EXPECT_TRUE(apply(first).park);
  EXPECT_EQ(data.missing_keys(first), std::vector<std::string>{"s1"});  // not the missing counter
  EXPECT_FALSE(apply(second).park);
  EXPECT_EQ(r.value(), "commit 0");
  EXPECT_EQ(data.size(), 2u);  // the votes and the decision: "tickets" was only read

  StoreRequest ticket = request(StoreRequest::OP_ADD, {"tickets"});
  ticket.set_delta(2);
  apply(ticket);
  StoreRequest third = vote("s2"), fourth = vote("s2");
  EXPECT_TRUE(apply(third).park);
  EXPECT_FALSE(apply(fourth).park);
  EXPECT_EQ(r.value(), "commit 2");
  EXPECT_EQ(vote_snapshot(r.value()), 2);
  ticket.set_delta(1);
  apply(ticket);  // after the decision: the parked voter still reads the value at completion
  EXPECT_FALSE(apply(third).park);
  EXPECT_EQ(r.value(), "commit 2");

  StoreRequest text = request(StoreRequest::OP_SET, {"tickets"});
  text.set_value("many");
  apply(text);
  StoreRequest refused = vote("s3");
  apply(refused);
  EXPECT_EQ(r.status(), StoreResponse::STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(r.error(), "store_vote's snapshot counter 'tickets' holds 'many', not a decimal int64 counter");
  EXPECT_EQ(data.missing_keys(request(StoreRequest::OP_GET, {"s3/votes"})), std::vector<std::string>{"s3/votes"});
}

TEST(StoreData, VoteSnapshotParsesWhatVoteDecisionWrites) {
  EXPECT_EQ(vote_decision("commit", 3), "commit 3");
  EXPECT_EQ(vote_snapshot(vote_decision("commit", 3)), 3);
  EXPECT_EQ(vote_snapshot(vote_decision("commit", -7)), -7);
  for (const char* none : {"commit", "abort", "commit ", "commit x", "commit 3x"}) {
    EXPECT_EQ(vote_snapshot(none), std::nullopt) << none;
  }
}

}  // namespace
}  // namespace fsdp::launch
