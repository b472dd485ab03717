#include "runtime/checkpoint/metadata_file.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cstdio>
#include <cstring>

#include "common/crc32c.h"
#include "runtime/checkpoint/errors.h"

namespace fsdp::runtime::checkpoint::detail {
namespace {

constexpr char kFooterMagic[4] = {'c', 'r', 'c', '1'};
constexpr size_t kFooterBytes = 8;

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", v);
  return text;
}

}  // namespace

std::string encode_metadata(const proto::checkpoint::CheckpointMetadata& meta) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream raw(&bytes);
    google::protobuf::io::CodedOutputStream out(&raw);
    out.SetSerializationDeterministic(true);
    meta.SerializeToCodedStream(&out);
  }
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  bytes.append(kFooterMagic, sizeof(kFooterMagic));
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return bytes;
}

proto::checkpoint::CheckpointMetadata decode_metadata(const std::string& bytes, const std::string& file) {
  proto::checkpoint::CheckpointMetadata meta;
  const bool footer =
      bytes.size() >= kFooterBytes && std::memcmp(bytes.data() + bytes.size() - kFooterBytes, kFooterMagic, 4) == 0;
  if (footer) {
    const size_t n = bytes.size() - kFooterBytes;
    uint32_t stored = 0;
    for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<uint8_t>(bytes[n + 4 + static_cast<size_t>(i)]);
    const uint32_t computed = crc32c(bytes.data(), n);
    if (stored != computed) {
      throw CheckpointError(file + ": checksum mismatch (crc32c stored " + hex32(stored) + ", computed " +
                            hex32(computed) + "): the metadata changed after it was written");
    }
    if (!meta.ParseFromArray(bytes.data(), static_cast<int>(n))) {
      throw CheckpointError(file + " is not valid checkpoint metadata");
    }
    return meta;
  }
  if (!meta.ParseFromString(bytes)) throw CheckpointError(file + " is not valid checkpoint metadata");
  if (meta.format_version() >= 2) {
    throw CheckpointError(file + ": format_version " + std::to_string(meta.format_version()) +
                          " metadata without its checksum footer (truncated, or rewritten by another tool)");
  }
  return meta;
}

}  // namespace fsdp::runtime::checkpoint::detail
