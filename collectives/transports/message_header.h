// The one header every framed message of the job carries, and the one check of a header that
// arrived. The fabric transport (fabric_transport.h, over tcp, ucx and mpi) sends it in front of
// every control message and tcp in front of every data piece; shared memory puts it in each slot of
// its control rings. So the message kinds, their fields and what counts as malformed are written
// down once, here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "collectives/transports/transport.h"

namespace fsdp {

inline constexpr uint32_t kMessageMagic = 0x66616231;  // "fab1": catches a stream that lost its framing
// The version a fabric hello carries; peers of another version are refused at start-up.
inline constexpr uint64_t kProtocolVersion = 1;
// No single message is this large; a header claiming more is corrupt, not a request to allocate it.
inline constexpr uint64_t kMaxMessageBytes = 1ull << 40;

// Small payloads go eager, inline behind their header: the send completes at once and an early
// arrival waits, copied, for its receive. Large ones use a receiver-driven rendezvous: a
// request-to-send announces them, the receiver answers clear-to-send once a receive matched, and only
// then do the bytes move, straight into the posted buffer. So a receiver never buffers a large
// payload it has no room for. The price is one round trip per large message, small beside its
// transfer time.
enum class MessageKind : uint16_t {
  kHello = 1,          // fabric start-up: bytes = protocol version, id = sender's rank, aux = job size
  kEager = 2,          // bytes = payload size, id = sender's message id; the payload follows
  kRequestToSend = 3,  // bytes = message size, id = sender's message id; shm: aux = the payload's address
  kClearToSend = 4,    // id = the message id it answers, bytes = the receiver's size, aux = the data id;
                       // status 1: size mismatch, nothing will move
  kData = 5,           // byte-stream fabrics (tcp): a piece of a cleared payload; id = data id,
                       // bytes = piece size, aux = the piece's offset in the message; the piece follows
  kPulled = 6,         // shm: the receiver copied the payload out of the sender's memory itself (status
                       // 1: it could not, or the sizes differ); id = the message id
};

// 48 bytes, host byte order: the ranks of one job share an architecture.
struct MessageHeader {
  uint32_t magic;
  uint16_t kind;
  uint16_t status;
  uint64_t tag_context;
  uint64_t tag_op;
  uint64_t bytes;
  uint64_t id;
  uint64_t aux;

  bool is(MessageKind k) const { return kind == static_cast<uint16_t>(k); }
  Tag tag() const { return Tag{tag_context, tag_op}; }
};
static_assert(sizeof(MessageHeader) == 48);

inline MessageHeader make_header(MessageKind kind, const Tag& tag, uint64_t bytes, uint64_t id) {
  MessageHeader h{};
  h.magic = kMessageMagic;
  h.kind = static_cast<uint16_t>(kind);
  h.tag_context = tag.context;
  h.tag_op = tag.op;
  h.bytes = bytes;
  h.id = id;
  return h;
}

// The payload bytes that follow `h` on the wire (eager payload or data piece), 0 for the rest.
inline size_t payload_bytes(const MessageHeader& h) {
  return h.is(MessageKind::kEager) || h.is(MessageKind::kData) ? static_cast<size_t>(h.bytes) : 0;
}

// Checks a header that arrived from a peer, before anything acts on it or allocates for it: empty
// when it is well formed for a transport whose eager payloads are at most `eager_limit` bytes;
// otherwise what is wrong ("bad magic 0xdeadbeef", "unknown frame kind 77", "eager frame of N
// bytes (limit L)"). Data pieces are only checked for an absurd size here: whether their id and
// range fit a transfer is the byte-stream fabric's to check.
std::string check_header(const MessageHeader& h, size_t eager_limit);

// "0xdeadbeef": how an unexpected magic number is shown in errors.
std::string magic_text(uint64_t magic);

// The reason every request with `peer` fails after it broke the protocol, e.g. "malformed frame from
// rank 3 over tcp: bad magic 0xdeadbeef (a corrupted stream, or not an fsdp peer of this version)".
std::string malformed_frame_message(int peer, std::string_view transport, const std::string& what);

}  // namespace fsdp
