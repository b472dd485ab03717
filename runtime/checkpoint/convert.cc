#include "runtime/checkpoint/convert.h"

#include <filesystem>

#include "proto/checkpoint.pb.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/metadata_file.h"
#include "runtime/checkpoint/reader.h"
#include "runtime/checkpoint/state_tensors.h"

namespace fsdp::runtime::checkpoint {

namespace fs = std::filesystem;

std::vector<NamedTensor> read_step_dir_parameters(const std::string& step_dir) {
  const proto::checkpoint::CheckpointMetadata meta = read_metadata(step_dir);
  detail::check_metadata(meta, step_dir);
  detail::ShardReader reader(step_dir, meta);
  std::vector<NamedTensor> out;
  for (const auto& t : meta.tensors()) {
    if (t.role() != "param") continue;
    NamedTensor n{t.name(), {t.shape().begin(), t.shape().end()}, {}};
    int64_t numel = 1;
    for (int64_t d : n.shape) numel *= d;
    const int64_t rows = n.shape.empty() ? 1 : n.shape[0];
    n.data.resize(static_cast<size_t>(numel));
    if (rows > 0) reader.read_rows(t, spec::RowRange{0, rows}, numel / rows, n.data, "parameter '" + t.name() + "'");
    out.push_back(std::move(n));
  }
  return out;
}

void write_weights_step_dir(const std::string& dir, const std::vector<NamedTensor>& tensors, int64_t step,
                            int64_t checksum_block_bytes) {
  if (fs::exists(dir)) throw CheckpointError(dir + " exists; a step directory is never overwritten");
  const std::string tmp = dir + ".tmp-" + std::to_string(make_nonce());
  const std::string file = detail::shard_file_name(0, 1);
  try {
    fs::create_directories(tmp);
    proto::checkpoint::CheckpointMetadata meta;
    meta.set_format_version(detail::kFormatVersion);
    meta.set_step(step);
    meta.set_shard_degree(1);
    meta.set_replicate_degree(1);
    meta.set_checksum_block_bytes(checksum_block_bytes);
    File f = File::create_new(tmp + "/" + file);
    int64_t offset = 0;
    for (const auto& t : tensors) {
      auto* m = meta.add_tensors();
      m->set_name(t.name);
      m->set_role("param");
      m->set_dtype("F32");
      for (int64_t d : t.shape) m->add_shape(d);
      const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
      if (rows == 0) continue;  // no rows, no chunk
      auto* c = m->add_chunks();
      c->set_file(file);
      c->set_row_end(rows);
      c->set_offset(offset);
      c->set_length(static_cast<int64_t>(t.data.size()) * detail::kF32Bytes);
      detail::fill_block_crcs(*c, reinterpret_cast<const char*>(t.data.data()), checksum_block_bytes);
      f.pwrite_all(t.data.data(), static_cast<size_t>(c->length()), offset);
      offset += c->length();
    }
    f.sync();
    f.close();
    auto* sf = meta.add_files();
    sf->set_name(file);
    sf->set_bytes(offset);
    detail::check_metadata(meta, dir);  // what every reader will check
    const std::string bytes = detail::encode_metadata(meta);
    File m = File::create_new(tmp + "/" + detail::kMetadataFile);
    m.pwrite_all(bytes.data(), bytes.size(), 0);
    m.sync();
    m.close();
    sync_dir(tmp);
    rename_durable(tmp, dir);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw CheckpointError("writing step directory " + dir + ": " + e.what());
  }
}

HfLlamaHeads hf_heads_from_shapes(const std::vector<NamedTensor>& tensors, int64_t n_heads) {
  int64_t q_rows = -1, k_rows = -1;
  for (const auto& t : tensors) {
    if (t.name == "layers.0.attention.wq.weight" && !t.shape.empty()) q_rows = t.shape[0];
    if (t.name == "layers.0.attention.wk.weight" && !t.shape.empty()) k_rows = t.shape[0];
  }
  if (q_rows < 0 || k_rows < 0) {
    throw CheckpointError("no layers.0.attention.wq/wk.weight: the q/k permutation is for Llama checkpoints");
  }
  if (n_heads <= 0 || q_rows % n_heads != 0 || k_rows % (q_rows / n_heads) != 0) {
    throw CheckpointError("--n-heads " + std::to_string(n_heads) + " does not divide wq's " + std::to_string(q_rows) +
                          " rows into heads that also divide wk's " + std::to_string(k_rows));
  }
  return HfLlamaHeads{n_heads, k_rows / (q_rows / n_heads)};
}

}  // namespace fsdp::runtime::checkpoint
