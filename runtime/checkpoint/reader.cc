#include "runtime/checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "common/crc32c.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/metadata_file.h"

namespace fsdp::runtime::checkpoint::detail {
namespace {

namespace fs = std::filesystem;
using proto::checkpoint::CheckpointMetadata;
using proto::checkpoint::Chunk;
using proto::checkpoint::Tensor;

std::string join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

// Checksum blocks of a `length`-byte chunk, without the overflow of (length + block - 1) / block when
// length or block is near 2^63.
int64_t blocks_of(int64_t length, int64_t block) { return length / block + (length % block != 0 ? 1 : 0); }

// The end of the block holding byte `end - 1`, capped at `cap` (the chunk's length >= end): the
// rounding up never passes the cap, so it cannot overflow.
int64_t end_of_block(int64_t end, int64_t block, int64_t cap) {
  const int64_t partial = end % block;
  if (partial == 0) return end;
  return block - partial >= cap - end ? cap : end + (block - partial);
}

std::string hex(uint64_t v, int width) {
  std::ostringstream s;
  s << std::hex << std::setw(width) << std::setfill('0') << v;
  return s.str();
}

}  // namespace

int64_t choose_step(const std::string& folder, int64_t step) {
  if (!fs::is_directory(folder)) throw CheckpointError("checkpoint folder '" + folder + "' does not exist");
  if (step < 0) {
    const auto latest = latest_step(folder);
    if (!latest) throw CheckpointError("no committed checkpoint in '" + folder + "'");
    return *latest;
  }
  if (fs::exists(join(join(folder, step_dir_name(step)), kMetadataFile))) return step;
  std::string have;
  for (int64_t s : committed_steps(folder)) have += (have.empty() ? "" : ", ") + std::to_string(s);
  throw CheckpointError("no committed checkpoint " + step_dir_name(step) + " in '" + folder +
                        "' (committed: " + (have.empty() ? "none" : have) + ")");
}

void check_tensors_match(const CheckpointMetadata& meta, const std::vector<TensorRef>& refs,
                         const std::string& step_dir) {
  std::unordered_map<std::string, const Tensor*> saved_params;
  for (const auto& t : meta.tensors()) {
    if (t.role() == "param") saved_params[t.name()] = &t;
  }
  std::vector<std::string> problems;
  std::unordered_map<std::string, bool> model_params;
  for (const auto& r : refs) {
    if (r.role != 0) continue;
    model_params[r.name] = true;
    auto it = saved_params.find(r.name);
    if (it == saved_params.end()) {
      problems.push_back("parameter '" + r.name + "' is missing from the checkpoint");
      continue;
    }
    const Tensor& t = *it->second;
    const std::vector<int64_t> saved(t.shape().begin(), t.shape().end());
    if (saved != r.shape) {
      problems.push_back("parameter '" + r.name + "' has shape " + shape_text(saved) + " in the checkpoint but " +
                         shape_text(r.shape) + " in the model");
    }
    if (t.dtype() != "F32") problems.push_back("parameter '" + r.name + "' has unsupported dtype " + t.dtype());
  }
  for (const auto& t : meta.tensors()) {
    if (t.role() == "param" && !model_params.count(t.name())) {
      problems.push_back("checkpoint parameter '" + t.name() + "' is not in the model");
    }
  }
  if (problems.empty()) return;
  std::string msg = step_dir + " does not match the model:";
  for (size_t i = 0; i < problems.size() && i < 8; ++i) msg += "\n  " + problems[i];
  if (problems.size() > 8) msg += "\n  ... and " + std::to_string(problems.size() - 8) + " more";
  throw CheckpointError(msg);
}

ShardReader::ShardReader(std::string step_dir, const CheckpointMetadata& meta)
    : dir_(std::move(step_dir)), block_(meta.checksum_block_bytes()) {
  for (const auto& f : meta.files()) expected_size_[f.name()] = f.bytes();
}

File& ShardReader::file_for(const std::string& name, const std::string& what) {
  auto it = open_files_.find(name);
  if (it != open_files_.end()) return it->second;
  File f = File::open_read(join(dir_, name));
  const auto want = expected_size_.find(name);
  if (want == expected_size_.end()) throw CheckpointError(join(dir_, name) + " is not listed in the metadata");
  if (f.size() != want->second) {
    throw CheckpointError("shard file " + join(dir_, name) + " has " + std::to_string(f.size()) +
                          " bytes, metadata records " + std::to_string(want->second) +
                          (f.size() < want->second ? " (truncated)" : "") + "; reading " + what);
  }
  return open_files_.emplace(name, std::move(f)).first->second;
}

void ShardReader::read_rows(const Tensor& t, spec::RowRange want, int64_t row_numel, std::span<float> dst,
                            const std::string& what) {
  const int64_t block = block_;
  const int64_t row_bytes = row_numel * kF32Bytes;
  int64_t covered = 0;
  for (const Chunk& c : t.chunks()) {
    const int64_t lo = std::max(want.begin, c.row_begin());
    const int64_t hi = std::min(want.end, c.row_end());
    if (lo >= hi) continue;
    if (c.length() != (c.row_end() - c.row_begin()) * row_bytes ||
        c.block_crc32c_size() != blocks_of(c.length(), block)) {
      throw CheckpointError(dir_ + ": metadata of " + what + " in " + c.file() + " is inconsistent");
    }
    // The bytes we need inside the chunk, widened to whole checksum blocks so each can be verified.
    const int64_t need_lo = (lo - c.row_begin()) * row_bytes;
    const int64_t need_hi = (hi - c.row_begin()) * row_bytes;
    const int64_t read_lo = need_lo / block * block;
    const int64_t read_hi = end_of_block(need_hi, block, c.length());
    const int64_t first_block = read_lo / block;
    const int64_t last_block = (read_hi - 1) / block;
    File& f = file_for(c.file(), what);
    buf_.resize(static_cast<size_t>(read_hi - read_lo));
    const size_t got = f.pread_some(buf_.data(), buf_.size(), c.offset() + read_lo);
    if (got != buf_.size()) {
      throw CheckpointError("shard file " + f.path() + " is truncated: " + what + " needs bytes [" +
                            std::to_string(c.offset() + read_lo) + ", " + std::to_string(c.offset() + read_hi) + ")");
    }
    for (int64_t b = first_block; b <= last_block; ++b) {
      const int64_t b_lo = b * block - read_lo;
      const int64_t b_len = std::min(block, c.length() - b * block);
      const uint32_t crc = crc32c(buf_.data() + b_lo, static_cast<size_t>(b_len));
      if (crc != c.block_crc32c(static_cast<int>(b))) {
        throw CheckpointError("checksum mismatch in shard file " + f.path() + ", " + what + ", bytes [" +
                              std::to_string(c.offset() + b * block) + ", " +
                              std::to_string(c.offset() + b * block + b_len) + "): crc32c " + hex(crc, 8) +
                              ", metadata records " + hex(c.block_crc32c(static_cast<int>(b)), 8));
      }
    }
    std::memcpy(dst.data() + (lo - want.begin) * row_numel, buf_.data() + (need_lo - read_lo),
                static_cast<size_t>(need_hi - need_lo));
    covered += hi - lo;
  }
  if (covered != want.size()) {
    throw CheckpointError(dir_ + ": the chunks of " + what + " cover " + std::to_string(covered) + " of rows [" +
                          std::to_string(want.begin) + ", " + std::to_string(want.end) + ")");
  }
}

}  // namespace fsdp::runtime::checkpoint::detail

namespace fsdp::runtime::checkpoint {

proto::checkpoint::CheckpointMetadata read_metadata(const std::string& step_dir) {
  const std::string file = step_dir + "/" + detail::kMetadataFile;
  return detail::decode_metadata(read_file(file), file);
}

}  // namespace fsdp::runtime::checkpoint
