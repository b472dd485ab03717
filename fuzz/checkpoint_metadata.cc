// libFuzzer target: metadata.pb of a checkpoint (metadata_file.h): the CRC footer check and the
// protobuf parse. Every malformed input must end in a CheckpointError, never a crash.
#include <cstdint>
#include <string>

#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/metadata_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto meta = fsdp::runtime::checkpoint::detail::decode_metadata(bytes, "metadata.pb");
    // What decodes must encode again (a round trip of the accepted subset).
    (void)fsdp::runtime::checkpoint::detail::encode_metadata(meta);
  } catch (const fsdp::runtime::checkpoint::CheckpointError&) {
  }
  return 0;
}
