// The bytes of metadata.pb: the serialized CheckpointMetadata followed by an 8-byte footer,
//
//   [message bytes][ "crc1" ][ CRC32C of the message bytes, u32 little-endian ]
//
// so that any change to the file after it was written (a flipped bit, a truncation) is refused
// before a field is believed: a flip inside the step number, the model hash or the training state
// parses as valid protobuf and no other check can see it. Format 1 files (no footer) still read.
#pragma once

#include <string>

#include "proto/checkpoint.pb.h"

namespace fsdp::runtime::checkpoint::detail {

// Deterministic serialization (map fields in key order) plus the footer.
std::string encode_metadata(const proto::checkpoint::CheckpointMetadata& meta);
// Checks the footer and parses. Throws CheckpointError naming `file`: checksum mismatch, a format 2+
// message without its footer, or bytes that are not a CheckpointMetadata.
proto::checkpoint::CheckpointMetadata decode_metadata(const std::string& bytes, const std::string& file);

}  // namespace fsdp::runtime::checkpoint::detail
