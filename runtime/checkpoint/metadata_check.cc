#include "runtime/checkpoint/metadata_check.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/state_tensors.h"  // kFormatVersion, kMetadataFile, kF32Bytes
#include "runtime/checkpoint/training_state.h"

namespace fsdp::runtime::checkpoint::detail {

using proto::checkpoint::CheckpointMetadata;
using proto::checkpoint::Chunk;
using proto::checkpoint::Tensor;

void check_metadata(const CheckpointMetadata& meta, const std::string& step_dir) {
  const std::string where = step_dir + "/" + kMetadataFile + ": ";
  auto refuse = [&](const std::string& what) { throw CheckpointError(where + what); };
  // Format 1 differs only in having no checksum footer (metadata_file.h): both read.
  if (meta.format_version() != kFormatVersion && meta.format_version() != 1) {
    refuse("format_version " + std::to_string(meta.format_version()) + "; this build reads 1 and " +
           std::to_string(kFormatVersion) +
           (meta.format_version() == 0 ? " (empty or not a checkpoint's metadata)" : ""));
  }
  // The writer's rule (CheckpointOptions): a positive multiple of 4. Any such size reads without
  // overflow (the reader's block arithmetic is checked), so none larger needs refusing.
  const int64_t block = meta.checksum_block_bytes();
  if (block <= 0 || block % 4 != 0) {
    refuse("checksum_block_bytes " + std::to_string(block) + " must be a positive multiple of 4");
  }
  if (meta.shard_degree() < 1) refuse("shard_degree " + std::to_string(meta.shard_degree()) + " must be >= 1");
  if (meta.replicate_degree() < 1) {
    refuse("replicate_degree " + std::to_string(meta.replicate_degree()) + " must be >= 1");
  }
  std::unordered_map<std::string, int64_t> file_bytes;
  for (const auto& f : meta.files()) {
    if (f.bytes() < 0) refuse("file '" + f.name() + "': bytes " + std::to_string(f.bytes()) + " is negative");
    file_bytes[f.name()] = f.bytes();
  }
  // Sizes in 128 bits: a corrupted shape or length must be refused here, never reach an allocation.
  using Wide = __int128;
  for (const Tensor& t : meta.tensors()) {
    const std::string name = "tensor '" + t.name() + "' (" + t.role() + ")";
    Wide row_numel = 1;
    for (int d = 0; d < t.shape_size(); ++d) {
      if (t.shape(d) < 0) refuse(name + ": shape[" + std::to_string(d) + "] = " + std::to_string(t.shape(d)) + " is negative");
      if (d > 0) row_numel *= t.shape(d);
      if (row_numel > std::numeric_limits<int64_t>::max() / kF32Bytes) {
        refuse(name + ": shape[" + std::to_string(d) + "] = " + std::to_string(t.shape(d)) +
               " makes a row larger than 2^63 bytes");
      }
    }
    const int64_t rows = t.shape_size() > 0 ? t.shape(0) : 1;
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const Chunk& c : t.chunks()) {
      const std::string chunk = name + ", chunk in '" + c.file() + "' rows [" + std::to_string(c.row_begin()) + ", " +
                                std::to_string(c.row_end()) + ")";
      if (c.row_begin() < 0 || c.row_begin() > c.row_end() || c.row_end() > rows) {
        refuse(chunk + ": row_begin/row_end outside [0, shape[0] = " + std::to_string(rows) + "] or reversed");
      }
      const Wide want = Wide(c.row_end() - c.row_begin()) * row_numel * kF32Bytes;
      if (c.length() != want) {
        refuse(chunk + ": length " + std::to_string(c.length()) + " is not rows x row elements x 4 bytes");
      }
      const auto f = file_bytes.find(c.file());
      if (f == file_bytes.end()) refuse(chunk + ": file is not listed in files");
      if (c.offset() < 0 || Wide(c.offset()) + c.length() > f->second) {
        refuse(chunk + ": offset " + std::to_string(c.offset()) + " + length " + std::to_string(c.length()) +
               " is outside the file's " + std::to_string(f->second) + " bytes");
      }
      // In 128 bits too: a length near 2^63 plus a block near 2^62 overflows int64.
      if (c.block_crc32c_size() != (Wide(c.length()) + block - 1) / block) {
        refuse(chunk + ": " + std::to_string(c.block_crc32c_size()) + " block_crc32c for length " +
               std::to_string(c.length()));
      }
      spans.emplace_back(c.row_begin(), c.row_end());
    }
    // The chunks cover rows [0, shape[0]) exactly once (a dropped or duplicated chunk is refused).
    std::sort(spans.begin(), spans.end());
    int64_t next = 0;
    for (const auto& [b, e] : spans) {
      if (b != next) refuse(name + ": chunks leave rows [" + std::to_string(std::min(b, next)) + ", " +
                            std::to_string(std::max(b, next)) + ") missing or covered twice");
      next = e;
    }
    if (next != rows) refuse(name + ": chunks cover rows [0, " + std::to_string(next) + ") of " + std::to_string(rows));
  }
  check_training_state(meta, where);
}

}  // namespace fsdp::runtime::checkpoint::detail
