#include "runtime/checkpoint/inspect.h"

#include <filesystem>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "runtime/checkpoint/checkpointer.h"
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
  report.files = meta.files_size();
  // The loader's reader over every chunk's rows: the same file-size, block and checksum checks.
  detail::ShardReader reader(step_dir, meta);
  std::set<std::string> failed;  // a file's first problem is reported, its other chunks skipped
  std::vector<float> rows;
  for (const auto& t : meta.tensors()) {
    int64_t row_numel = 1;
    for (int d = 1; d < t.shape_size(); ++d) row_numel *= t.shape(d);
    for (const auto& c : t.chunks()) {
      ++report.chunks;
      if (failed.count(c.file()) != 0) continue;
      const std::string what = "parameter '" + t.name() + "' (" + t.role() + ")";
      try {
        reader.open(c.file(), what);  // its size checked before a buffer of the chunk's size is made
        rows.resize(static_cast<size_t>(c.length() / detail::kF32Bytes));
        reader.read_rows(t, {c.row_begin(), c.row_end()}, row_numel, rows, what);
        report.bytes += c.length();
      } catch (const std::exception& e) {
        failed.insert(c.file());
        report.errors.push_back((fs::path(step_dir) / c.file()).string() + ": " + what + ": " + e.what());
      }
    }
  }
  return report;
}

}  // namespace fsdp::runtime::checkpoint
