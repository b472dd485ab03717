// libFuzzer target: a safetensors file's head (safetensors_header.h): the 8-byte length, then the
// JSON header, with the data assumed to run 4 KiB past it. Errors are CheckpointErrors, never crashes.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fsdp::runtime::checkpoint;
  if (size < 8) return 0;
  uint64_t len = 0;
  std::memcpy(&len, data, 8);
  const int64_t file_size = static_cast<int64_t>(size) + 4096;
  try {
    check_safetensors_header_length(len, file_size, "model.safetensors");
    if (len > size - 8) return 0;  // the header runs into the (absent) data
    const std::string_view text(reinterpret_cast<const char*>(data) + 8, len);
    (void)decode_safetensors_header(text, file_size, "model.safetensors");
  } catch (const CheckpointError&) {
  }
  return 0;
}
