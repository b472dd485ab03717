// libFuzzer target: the rendezvous store's frame decoder (launch/store_frame.h) over a byte stream as
// a client would send it: 4-byte length prefixes checked the moment they arrive, bodies read in the
// server's growing pieces, each parsed as a StoreRequest and applied to the store's keys
// (launch/store_data.h) as the server does. The first byte picks the direction: odd, the stream is
// replies as the client reads them. Properties: reads never pass the announced length nor hold more
// than twice what arrived plus 4 KiB; what parses serialises to a frame that decodes to the same
// length; only a GET or WAIT with a key missing, or a VOTE with its decision missing, parks; a VOTE
// without two or three keys is refused.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "launch/store_data.h"
#include "launch/store_frame.h"
#include "proto/store.pb.h"

namespace {

using namespace fsdp::launch;

// The body reads of store_server.cc's read_body for an announced `expected` of which `arrived` come.
void check_body_reads(size_t expected, size_t arrived) {
  size_t have = 0;
  while (have < arrived) {
    const size_t want = store_body_read_size(have, expected);
    if (want == 0 || have + want > expected || have + want > 2 * have + 4096) __builtin_trap();
    have += std::min(want, arrived - have);
  }
  if (have == expected && store_body_read_size(have, expected) != 0) __builtin_trap();
}

template <class Message>
void decode_stream(const uint8_t* data, size_t size, uint32_t limit) {
  StoreData store;
  while (size >= 4) {
    StoreLengthPrefix prefix;
    std::memcpy(prefix.data(), data, 4);
    data += 4;
    size -= 4;
    const uint32_t announced = decode_store_length(prefix);
    if (!check_store_frame_length(announced, limit).empty()) return;  // the connection is closed
    check_body_reads(announced, std::min<size_t>(announced, size));
    if (announced > size) return;  // the rest never comes: the io timeout closes it
    Message message;
    if (!message.ParseFromArray(data, static_cast<int>(announced))) return;  // closed: not a message
    data += announced;
    size -= announced;
    const std::string frame = store_frame_of(message);
    StoreLengthPrefix again;
    std::memcpy(again.data(), frame.data(), 4);
    if (decode_store_length(again) != frame.size() - 4) __builtin_trap();
    if constexpr (std::is_same_v<Message, fsdp::proto::StoreRequest>) {
      (void)store_op_name(message.op());
      fsdp::proto::StoreResponse response;
      const StoreData::Outcome outcome = store.apply(message, &response);
      const bool waits = message.op() == fsdp::proto::StoreRequest::OP_GET ||
                         message.op() == fsdp::proto::StoreRequest::OP_WAIT ||
                         message.op() == fsdp::proto::StoreRequest::OP_VOTE;
      if (outcome.park && (!waits || store.missing_keys(message).empty())) __builtin_trap();
      const bool vote_keys = message.keys_size() == 2 || message.keys_size() == 3;
      if (message.op() == fsdp::proto::StoreRequest::OP_VOTE && !vote_keys &&
          response.status() != fsdp::proto::StoreResponse::STATUS_INVALID_ARGUMENT) {
        __builtin_trap();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    decode_stream<fsdp::proto::StoreResponse>(data + 1, size - 1, kStoreMaxReplyBytes);
  } else {
    decode_stream<fsdp::proto::StoreRequest>(data + 1, size - 1, kStoreMaxFrameBytes);
  }
  return 0;
}
