#include "launch/store_frame.h"

#include <algorithm>

#include "proto/store.pb.h"

namespace fsdp::launch {
namespace {

using proto::StoreRequest;

// A request's body is read at most this much at a time, the buffer growing only by what arrived.
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kFirstRead = 4096;

}  // namespace

std::string store_address(const std::string& host, uint16_t port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& key : keys) out += (out.empty() ? "'" : ", '") + key + "'";
  return out;
}

StoreLengthPrefix encode_store_length(uint32_t size) {
  return {static_cast<unsigned char>(size), static_cast<unsigned char>(size >> 8),
          static_cast<unsigned char>(size >> 16), static_cast<unsigned char>(size >> 24)};
}

uint32_t decode_store_length(const StoreLengthPrefix& b) {
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

std::string store_frame_of(const google::protobuf::MessageLite& message) {
  const std::string body = message.SerializeAsString();
  const StoreLengthPrefix prefix = encode_store_length(static_cast<uint32_t>(body.size()));
  std::string frame(reinterpret_cast<const char*>(prefix.data()), prefix.size());
  frame += body;
  return frame;
}

std::string check_store_frame_length(uint32_t size, uint32_t limit) {
  if (size <= limit) return {};
  return "frame of " + std::to_string(size) + " bytes exceeds the " + std::to_string(limit) + "-byte bound";
}

size_t store_body_read_size(size_t have, size_t expected) {
  if (have >= expected) return 0;
  return std::min({kReadChunk, expected - have, std::max(have, kFirstRead)});
}

const char* store_op_name(int op) {
  switch (op) {
    case StoreRequest::OP_SET:
      return "store_set";
    case StoreRequest::OP_GET:
      return "store_get";
    case StoreRequest::OP_WAIT:
      return "store_wait";
    case StoreRequest::OP_ADD:
      return "store_add";
    case StoreRequest::OP_COMPARE_SET:
      return "store_compare_set";
    case StoreRequest::OP_DELETE:
      return "store_delete";
    case StoreRequest::OP_NUM_KEYS:
      return "store_num_keys";
    case StoreRequest::OP_VOTE:
      return "store_vote";
    default:
      return "store_unknown";
  }
}

std::string store_request_error(const StoreRequest& request) {
  const StoreRequest::Op op = request.op();
  switch (op) {
    case StoreRequest::OP_SET:
    case StoreRequest::OP_GET:
    case StoreRequest::OP_ADD:
    case StoreRequest::OP_COMPARE_SET:
    case StoreRequest::OP_DELETE:
      if (request.keys_size() != 1) {
        return std::string(store_op_name(op)) + " takes exactly one key, got " + std::to_string(request.keys_size());
      }
      return {};
    case StoreRequest::OP_WAIT:
      if (request.keys_size() == 0) return "store_wait needs at least one key";
      return {};
    case StoreRequest::OP_VOTE:
      if (request.keys_size() != 2 && request.keys_size() != 3) {
        return "store_vote takes two or three keys (the counter, the decision, optionally the snapshot counter), "
               "got " +
               std::to_string(request.keys_size());
      }
      return {};
    case StoreRequest::OP_NUM_KEYS:
      return {};
    default:
      return "unknown store op " + std::to_string(static_cast<int>(op));
  }
}

}  // namespace fsdp::launch
