// The store's wire format as bytes, with no socket: the 4-byte little-endian length prefix, the bound
// a prefix is checked against the moment it arrives, how much of a body to read next, and the check
// of a parsed request, and the job-secret handshake's constants. The server and the client
// (store_server.cc, store_client.cc) and the fuzz target (fuzz/store_frame.cc) all run these, so what
// is fuzzed is what serves.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace google::protobuf {
class MessageLite;
}
namespace fsdp::proto {
class StoreRequest;
}

namespace fsdp::launch {

// No request or response is near this large (keys and values are addresses and small blobs); a length
// prefix above it means a corrupt or foreign stream, and the server drops the connection rather than
// allocate it.
inline constexpr uint32_t kStoreMaxFrameBytes = 64u << 20;
// A GET's reply carries a value that itself fit in a request frame, plus a few bytes of framing: the
// client allows that much over kStoreMaxFrameBytes.
inline constexpr uint32_t kStoreMaxReplyBytes = kStoreMaxFrameBytes + 4096;

// Every store connection opens with a challenge-response on the job secret (common/job_secret.h), so
// only processes holding the secret read or write keys, and the secret never crosses the wire:
//   server -> client  kStoreAuthMagic (8 bytes), the server's nonce (kAuthNonceBytes)
//   client -> server  the client's nonce, auth_proof(secret, kStoreClientLabel, server nonce + client nonce)
//   server -> client  auth_proof(secret, kStoreServerLabel, server nonce + client nonce)
// A client whose proof is wrong is closed and logged (rate-limited) before any request of its is read;
// a server whose proof is wrong is refused by the client (mutual: a squatter on the port learns nothing
// and serves no one). With no secret on either side the proofs use the empty key.
inline constexpr std::string_view kStoreAuthMagic = "fsdpsto1";
inline constexpr std::string_view kStoreClientLabel = "fsdp-store client";
inline constexpr std::string_view kStoreServerLabel = "fsdp-store server";

// "host:port" ("[host]:port" for IPv6): a store's address in messages and what a launcher hands out.
std::string store_address(const std::string& host, uint16_t port);

// "'a', 'b'": keys as error messages name them.
std::string quoted_keys(const std::vector<std::string>& keys);

using StoreLengthPrefix = std::array<unsigned char, 4>;

// Little-endian on the wire whatever the host, so a store can serve mixed machines.
StoreLengthPrefix encode_store_length(uint32_t size);
uint32_t decode_store_length(const StoreLengthPrefix& prefix);

// The length prefix, then the serialized message.
std::string store_frame_of(const google::protobuf::MessageLite& message);

// Empty when a body of `size` announced bytes may be read (at most `limit`: kStoreMaxFrameBytes for
// requests, kStoreMaxReplyBytes for replies); otherwise why not ("frame of N bytes exceeds the
// L-byte bound").
std::string check_store_frame_length(uint32_t size, uint32_t limit);

// How many bytes to read next into a body of `expected` bytes of which `have` arrived: 4 KiB, then
// doubling with what arrived, at most 64 KiB a read and never past `expected`. So the buffer holds
// about what arrived (at most twice it plus 4 KiB), never the announced length. 0 when complete.
size_t store_body_read_size(size_t have, size_t expected);

// "store_set" for OP_SET, ..., "store_unknown" for an op this build does not know.
const char* store_op_name(int op);

// Empty when a parsed request is one the server can act on; otherwise the reason it is refused with
// STATUS_INVALID_ARGUMENT: an unknown op, a keyed op without exactly one key, a WAIT without keys, a
// VOTE without two or three.
std::string store_request_error(const proto::StoreRequest& request);

}  // namespace fsdp::launch
