#include "runtime/checkpoint/inspect.h"

#include <filesystem>
#include <iomanip>
#include <map>
#include <sstream>

#include "runtime/checkpoint/checkpointer.h"
#include "common/crc32c.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/reader.h"
#include "runtime/checkpoint/state_tensors.h"

namespace fsdp::runtime::checkpoint {

namespace fs = std::filesystem;

std::string resolve_step_dir(const std::string& path) {
  if (fs::exists(fs::path(path) / detail::kMetadataFile)) return path;
  if (!fs::is_directory(path)) throw CheckpointError("'" + path + "' is not a directory");
  const auto step = latest_step(path);
  if (!step) throw CheckpointError("'" + path + "' is neither a checkpoint step directory nor a folder holding one");
  return (fs::path(path) / step_dir_name(*step)).string();
}

std::string describe(const CheckpointMetadata& meta, const std::string& step_dir) {
  std::ostringstream o;
  o << "checkpoint " << step_dir << "\n";
  o << "  format version " << meta.format_version() << ", step " << meta.step() << "\n";
  o << "  model '" << meta.model_name() << "', config hash '" << meta.model_config_hash() << "'\n";
  o << "  shard degree " << meta.shard_degree() << ", replicate degree " << meta.replicate_degree() << "\n";
  o << "  optimizer " << (meta.optimizer().empty() ? "none" : meta.optimizer()) << ", " << meta.optimizer_steps()
    << " steps taken\n";
  o << "  checksum: crc32c per chunk and per " << meta.checksum_block_bytes() << "-byte block\n";
  int64_t params = 0;
  for (const auto& t : meta.tensors()) params += t.role() == "param";
  o << "parameters (" << params << "):\n";
  for (const auto& t : meta.tensors()) {
    if (t.role() != "param") continue;
    o << "  " << t.name() << " " << t.dtype() << " [";
    for (int i = 0; i < t.shape_size(); ++i) o << (i ? ", " : "") << t.shape(i);
    o << "] unit " << t.unit() << ", " << t.chunks_size() << " chunks\n";
  }
  std::map<std::string, int> roles;
  for (const auto& t : meta.tensors()) {
    if (t.role() != "param") ++roles[t.role()];
  }
  for (const auto& [role, n] : roles) o << "optimizer state '" << role << "': " << n << " tensors\n";
  o << "files (" << meta.files_size() << "):\n";
  for (const auto& f : meta.files()) o << "  " << f.name() << " shard rank " << f.shard_rank() << ", " << f.bytes() << " bytes\n";
  o << "training state (" << meta.training_state_size() << " keys):\n";
  std::map<std::string, size_t> keys;
  for (const auto& [k, v] : meta.training_state()) keys[k] = v.size();
  for (const auto& [k, n] : keys) o << "  " << k << ": " << n << " bytes\n";
  return o.str();
}

VerifyReport verify_checkpoint(const std::string& step_dir) {
  VerifyReport report;
  CheckpointMetadata meta;
  try {
    meta = read_metadata(step_dir);
    detail::check_metadata(meta, step_dir);  // exactly what the loader refuses, before reading any data
  } catch (const std::exception& e) {
    report.errors.push_back(e.what());
    return report;
  }
  const int64_t block = meta.checksum_block_bytes();
  std::map<std::string, int64_t> sizes;
  std::map<std::string, File> files;
  for (const auto& f : meta.files()) {
    const std::string path = (fs::path(step_dir) / f.name()).string();
    ++report.files;
    try {
      File file = File::open_read(path);
      if (file.size() != f.bytes()) {
        report.errors.push_back(path + ": " + std::to_string(file.size()) + " bytes, metadata records " +
                                std::to_string(f.bytes()) + (file.size() < f.bytes() ? " (truncated)" : ""));
        continue;  // its chunks are reported below, not read: offsets are checked against the recorded size
      }
      files.emplace(f.name(), std::move(file));
    } catch (const std::exception& e) {
      report.errors.push_back(e.what());
    }
  }
  std::vector<char> buf;
  for (const auto& t : meta.tensors()) {
    for (const auto& c : t.chunks()) {
      ++report.chunks;
      const std::string path = (fs::path(step_dir) / c.file()).string();
      const std::string what = path + ": parameter '" + t.name() + "' (" + t.role() + ")";
      auto it = files.find(c.file());
      if (it == files.end()) {
        if (!sizes.count(c.file())) report.errors.push_back(what + ": file missing, unreadable or of the wrong size");
        sizes[c.file()] = 0;
        continue;
      }
      buf.resize(static_cast<size_t>(c.length()));
      const size_t got = it->second.pread_some(buf.data(), buf.size(), c.offset());
      report.bytes += static_cast<int64_t>(got);
      if (got != buf.size()) {
        report.errors.push_back(what + ": truncated, bytes [" + std::to_string(c.offset()) + ", " +
                                std::to_string(c.offset() + c.length()) + ") not all present");
        continue;
      }
      if (crc32c(buf.data(), buf.size()) != c.crc32c()) {
        report.errors.push_back(what + ": checksum mismatch in bytes [" + std::to_string(c.offset()) + ", " +
                                std::to_string(c.offset() + c.length()) + ")");
        continue;
      }
      for (int b = 0; b < c.block_crc32c_size(); ++b) {
        const int64_t lo = b * block;
        const int64_t len = std::min(block, c.length() - lo);
        if (len <= 0 || crc32c(buf.data() + lo, static_cast<size_t>(len)) != c.block_crc32c(b)) {
          report.errors.push_back(what + ": block checksum " + std::to_string(b) + " does not match");
          break;
        }
      }
    }
  }
  return report;
}

}  // namespace fsdp::runtime::checkpoint
