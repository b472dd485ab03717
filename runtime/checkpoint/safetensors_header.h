// The safetensors header as bytes: its length check and its JSON decoding, with no file and no model,
// so that read_safetensors_header (safetensors.h) and the fuzz target (fuzz/safetensors_header.cc)
// run the same code.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::runtime::checkpoint {

inline constexpr int64_t kMaxSafetensorsHeaderBytes = 100 << 20;  // as the reference implementation limits it

struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // absolute file offsets of the data
  int64_t end = 0;
  std::string path;  // the file it is in
};

struct SafetensorsHeader {
  int64_t header_bytes = 0;  // H
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> tensors;  // in file order
};

// Throws CheckpointError naming `path` when the header length `len` (the file's first 8 bytes) is
// over kMaxSafetensorsHeaderBytes or does not fit a file of `file_size` bytes: checked before the
// header is allocated.
void check_safetensors_header_length(uint64_t len, int64_t file_size, const std::string& path);

// Decodes the JSON header `text` (H = text.size() bytes, after the 8-byte length) of a file of
// `file_size` bytes. Throws CheckpointError naming `path` and the tensor or field at fault.
SafetensorsHeader decode_safetensors_header(std::string_view text, int64_t file_size, const std::string& path);

}  // namespace fsdp::runtime::checkpoint
