// libFuzzer target: metadata.pb of a checkpoint as every reader takes it: decode_metadata (the CRC
// footer check and the protobuf parse, metadata_file.h), then check_metadata (metadata_check.h), the
// one check the loader and `fsdp-ckpt verify` run before any data is read. Every malformed input must
// end in a CheckpointError, never a crash or an undefined operation.
#include <cstdint>
#include <string>

#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/metadata_check.h"
#include "runtime/checkpoint/metadata_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ckpt = fsdp::runtime::checkpoint;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto meta = ckpt::detail::decode_metadata(bytes, "metadata.pb");
    // What decodes must encode again (a round trip of the accepted subset).
    (void)ckpt::detail::encode_metadata(meta);
    ckpt::detail::check_metadata(meta, "step-0");
  } catch (const ckpt::CheckpointError&) {
  }
  return 0;
}
