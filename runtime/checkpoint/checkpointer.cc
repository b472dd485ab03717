#include "runtime/checkpoint/checkpointer.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <unordered_map>

#include "common/fault_injection.h"
#include "proto/checkpoint.pb.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/metadata_file.h"
#include "runtime/checkpoint/reader.h"
#include "runtime/checkpoint/state_tensors.h"

namespace fsdp::runtime::checkpoint {

static_assert(std::endian::native == std::endian::little, "checkpoint files are little-endian, written raw");

namespace fs = std::filesystem;
using detail::TensorRef;
using proto::checkpoint::CheckpointMetadata;
using proto::checkpoint::Chunk;
using proto::checkpoint::ShardFile;
using proto::checkpoint::ShardIndex;
using proto::checkpoint::Tensor;

namespace {

std::string join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

std::string hex(uint64_t v, int width) {
  std::ostringstream s;
  s << std::hex << std::setw(width) << std::setfill('0') << v;
  return s.str();
}

// "step-<digits>" -> the step; nullopt otherwise.
std::optional<int64_t> parse_step_name(const std::string& name) {
  if (!name.starts_with("step-") || name.size() == 5 || name.size() > 5 + 18) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

void make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw CheckpointError("mkdir '" + dir + "' failed: " + std::strerror(errno));
  }
}

// One rank's rows of one tensor, as they go into its shard file.
struct Piece {
  int tensor = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  const float* data = nullptr;
  int64_t count = 0;  // elements
};

}  // namespace

std::string step_dir_name(int64_t step) { return "step-" + std::to_string(step); }

std::vector<int64_t> committed_steps(const std::string& folder) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const auto step = parse_step_name(it->path().filename().string());
    if (step && fs::exists(it->path() / detail::kMetadataFile)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> latest_step(const std::string& folder) {
  std::error_code ec;
  const fs::path pointer = fs::path(folder) / detail::kLatestFile;
  if (fs::exists(pointer, ec)) {
    try {
      std::string s = read_file(pointer.string());
      while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
      const auto step = parse_step_name(s);
      if (step && fs::exists(fs::path(folder) / s / detail::kMetadataFile)) return step;
    } catch (const CheckpointError&) {
      // unreadable pointer: fall back to the scan
    }
  }
  const auto steps = committed_steps(folder);
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

int remove_partial_saves(const std::string& folder) {
  int removed = 0;
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // .tmp-step-* directories of crashed saves; latest.tmp-* pointer files of a crashed commit.
    if (name.starts_with(detail::kTmpPrefix) || name.starts_with(std::string(detail::kLatestFile) + ".tmp-")) {
      doomed.push_back(it->path());
    }
  }
  for (const auto& p : doomed) {
    fs::remove_all(p, ec);
    if (!ec) ++removed;
  }
  return removed;
}

std::pair<std::string, std::vector<std::string>> optimizer_kind(ShardedOptimizer* optimizer) {
  if (optimizer == nullptr) return {"", {}};
  if (dynamic_cast<AdamW*>(optimizer) != nullptr) return {"adamw", {"exp_avg", "exp_avg_sq"}};
  if (dynamic_cast<SgdMomentum*>(optimizer) != nullptr) return {"sgd_momentum", {"momentum"}};
  throw CheckpointError("checkpoints know AdamW and SgdMomentum; this optimizer is neither");
}

// Everything a save needs after save() returned: the pieces to write (pointing into the live shards in
// sync mode, into `snapshot` in async mode) and what rank 0 needs for the metadata.
struct Checkpointer::SaveJob {
  int64_t step = 0;
  std::string config_hash;
  ShardedOptimizer* optimizer = nullptr;  // null: parameters only (a model-only save)
  int64_t optimizer_steps = 0;  // read at save() time: training moves on while an async write runs
  TrainingState state;
  std::string tmp_dir;
  std::string final_dir;
  std::string file;  // empty: this rank does not write (HSDP replica > 0)
  std::vector<Piece> pieces;
  TrackedBuffer<float> snapshot;
};

Checkpointer::Checkpointer(FsdpModel& model, ShardedOptimizer* optimizer, Communicator& world,
                           CheckpointOptions options, MemoryTracker& tracker)
    : model_(model), optimizer_(optimizer), options_(std::move(options)), tracker_(tracker) {
  if (options_.folder.empty()) throw CheckpointError("CheckpointOptions.folder is empty");
  if (options_.checksum_block_bytes < 4 || options_.checksum_block_bytes % 4 != 0) {
    throw CheckpointError("checksum_block_bytes must be a positive multiple of 4 (got " +
                          std::to_string(options_.checksum_block_bytes) + ")");
  }
  optimizer_kind(optimizer_);  // rejects unknown optimizers up front
  comm_ = world.split(0, world.rank());
}

Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp checkpoint: async save failed: %s\n", e.what());
  }
}

void Checkpointer::wait() {
  if (!writer_.joinable()) return;
  writer_.join();
  if (writer_error_) std::rethrow_exception(std::exchange(writer_error_, nullptr));
}

void Checkpointer::save(int64_t step, const std::string& model_config_hash, const TrainingState& state,
                        bool model_only) {
  wait();
  if (step < 0) throw CheckpointError("checkpoint step must be >= 0 (got " + std::to_string(step) + ")");
  const std::string& folder = options_.folder;
  const std::string final_dir = join(folder, step_dir_name(step));

  // Rank 0 decides (folder created, stale partial saves removed, does the step exist?) and picks the
  // nonce of the temporary directory; every rank learns both from one broadcast.
  int64_t decision[2] = {0, 0};
  std::string error;
  if (comm_->rank() == 0) {
    try {
      fs::create_directories(folder);
      remove_partial_saves(folder);  // safe: the previous save finished on every rank (its commit was collective)
      decision[0] = fs::exists(final_dir) ? 1 : 0;
      decision[1] = static_cast<int64_t>(make_nonce());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = detail::agree_on_error(*comm_, error);
  if (!error.empty()) throw CheckpointError("checkpoint save of step " + std::to_string(step) + ": " + error);
  comm_->broadcast(decision, decision, 2, DataType::kInt64, 0).wait();
  if (decision[0] != 0) {
    throw CheckpointError("checkpoint " + final_dir +
                          " already exists; committed checkpoints are never overwritten (delete it or save another step)");
  }

  auto job = std::make_unique<SaveJob>();
  job->step = step;
  job->config_hash = model_config_hash;
  job->optimizer = model_only ? nullptr : optimizer_;
  job->optimizer_steps = job->optimizer != nullptr ? job->optimizer->steps_taken() : 0;
  job->state = state;
  job->tmp_dir = join(folder, std::string(detail::kTmpPrefix) + step_dir_name(step) + "-" + hex(static_cast<uint64_t>(decision[1]), 12));
  job->final_dir = final_dir;

  const ProcessGroups& groups = model_.groups();
  if (groups.replica_index() == 0) {
    job->file = detail::shard_file_name(groups.shard_rank(), groups.shard_degree());
    const auto state_names = optimizer_kind(job->optimizer).second;
    // Pieces name the tensors of the whole model (under expert parallelism the rank holds only some
    // experts, each sharded over its expert FSDP group: unit.shard_rank()).
    const auto index = detail::tensor_index(detail::full_tensor_refs(model_, state_names));
    for (const auto& ref : detail::tensor_refs(model_, state_names)) {
      const FsdpUnit& unit = model_.unit(ref.unit);
      const auto& pl = unit.layout().params().at(static_cast<size_t>(ref.param));
      const spec::RowRange rows = pl.rows_of(unit.shard_rank());
      if (rows.size() == 0) continue;  // padding only
      // Real rows come first in a shard; the padding after them is never written.
      job->pieces.push_back(Piece{index.at(ref.role_name + "/" + ref.name), rows.begin, rows.end,
                                  detail::shard_of(model_, job->optimizer, ref).data(), rows.size() * pl.row_numel});
    }
    if (options_.async) {
      int64_t total = 0;
      for (const auto& p : job->pieces) total += p.count;
      job->snapshot.reset(tracker_, MemoryCategory::kOther, static_cast<size_t>(total));
      float* dst = job->snapshot.data();
      for (auto& p : job->pieces) {
        std::copy(p.data, p.data + p.count, dst);
        p.data = dst;
        dst += p.count;
      }
    }
  }

  if (!options_.async) {
    run_save(*job);
    return;
  }
  writer_ = std::thread([this, job = std::move(job)]() mutable {
    try {
      run_save(*job);
    } catch (...) {
      writer_error_ = std::current_exception();
    }
  });
}

void Checkpointer::run_save(SaveJob& job) {
  const int64_t block = options_.checksum_block_bytes;
  int files_written = 0;
  const ProcessGroups& groups = model_.groups();

  // 1. Every writer: its shard file, durable, plus the index of what it wrote.
  ShardIndex index;
  index.set_shard_rank(groups.shard_rank());
  if (!job.file.empty()) {
    try {
      make_dir(job.tmp_dir);
      const std::string path = join(job.tmp_dir, job.file);
      File f = File::create_new(path);
      int64_t offset = 0;
      for (const auto& p : job.pieces) {
        Chunk* c = index.add_chunks();
        index.add_tensor(p.tensor);
        c->set_file(job.file);
        c->set_owner_rank(groups.shard_rank());
        c->set_row_begin(p.row_begin);
        c->set_row_end(p.row_end);
        c->set_offset(offset);
        c->set_length(p.count * detail::kF32Bytes);
        detail::fill_block_crcs(*c, reinterpret_cast<const char*>(p.data), block);
        f.pwrite_all(p.data, static_cast<size_t>(c->length()), offset);
        offset += c->length();
      }
      f.sync();
      f.close();
      index.set_file(job.file);
      index.set_bytes(offset);
      detail::count_file_written(files_written);
    } catch (const std::exception& e) {
      index.set_error(e.what());
    }
  }
  job.snapshot.release();  // written (or failed): the host copy is no longer needed
  fault::point(fault::When::kInCheckpoint, job.step);  // tests: a rank lost after its file, before the commit

  // 2. Gather every rank's index: this is also the barrier that orders the commit after all writes.
  std::string mine;
  index.SerializeToString(&mine);
  const auto all = detail::all_gather_strings(*comm_, mine);
  std::vector<ShardIndex> indices(all.size());
  std::string error;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!indices[r].ParseFromString(all[r])) {
      error = "rank " + std::to_string(r) + ": unreadable shard index";
    } else if (error.empty() && !indices[r].error().empty()) {
      error = "rank " + std::to_string(r) + ": " + indices[r].error();
    }
  }

  // 3. Rank 0 commits: metadata, fsync, rename, latest pointer, retention.
  if (comm_->rank() == 0) {
    if (error.empty()) {
      try {
        const auto [opt_name, state_names] = optimizer_kind(job.optimizer);
        const auto refs = detail::full_tensor_refs(model_, state_names);
        CheckpointMetadata meta;
        meta.set_format_version(detail::kFormatVersion);
        meta.set_step(job.step);
        meta.set_shard_degree(groups.shard_degree());
        meta.set_replicate_degree(groups.replicate_degree());
        meta.set_model_name(model_.model().name);
        meta.set_model_config_hash(job.config_hash);
        meta.set_optimizer(opt_name);
        meta.set_optimizer_steps(job.optimizer_steps);
        meta.set_checksum_block_bytes(block);
        for (const auto& r : refs) {
          Tensor* t = meta.add_tensors();
          t->set_name(r.name);
          t->set_role(r.role_name);
          t->set_dtype("F32");
          for (int64_t d : r.shape) t->add_shape(d);
          t->set_unit(model_.full_model().units.at(static_cast<size_t>(r.unit)).name);
        }
        for (const auto& idx : indices) {  // rank order == shard rank order for replica 0
          if (idx.file().empty()) continue;
          ShardFile* f = meta.add_files();
          f->set_name(idx.file());
          f->set_shard_rank(idx.shard_rank());
          f->set_bytes(idx.bytes());
          for (int i = 0; i < idx.chunks_size(); ++i) *meta.mutable_tensors(idx.tensor(i))->add_chunks() = idx.chunks(i);
        }
        for (const auto& [k, v] : job.state) (*meta.mutable_training_state())[k] = v;
        const std::string bytes = detail::encode_metadata(meta);
        make_dir(job.tmp_dir);  // a world where every writer's rows are empty still commits a directory
        File f = File::create_new(join(job.tmp_dir, detail::kMetadataFile));
        f.pwrite_all(bytes.data(), bytes.size(), 0);
        f.sync();
        f.close();
        detail::count_file_written(files_written);
        sync_dir(job.tmp_dir);
        rename_durable(job.tmp_dir, job.final_dir);
        write_file_atomic(join(options_.folder, detail::kLatestFile), step_dir_name(job.step) + "\n");
        if (options_.keep_latest_k > 0) {
          auto steps = committed_steps(options_.folder);
          std::erase(steps, job.step);
          const int64_t drop = static_cast<int64_t>(steps.size()) - (options_.keep_latest_k - 1);
          for (int64_t i = 0; i < drop; ++i) fs::remove_all(join(options_.folder, step_dir_name(steps[static_cast<size_t>(i)])));
        }
      } catch (const std::exception& e) {
        error = std::string("commit: ") + e.what();
      }
    }
    if (!error.empty()) {
      std::error_code ec;
      fs::remove_all(job.tmp_dir, ec);  // never leave a half-written step behind when we can help it
    }
  }

  // 4. Everyone learns the outcome.
  error = detail::agree_on_error(*comm_, comm_->rank() == 0 ? error : std::string());
  if (!error.empty()) {
    throw CheckpointError("checkpoint step " + std::to_string(job.step) + " in " + options_.folder +
                          " was not committed: " + error);
  }
}

LoadResult Checkpointer::load(const std::string& model_config_hash, int64_t step) {
  return load_from(options_.folder, model_config_hash, step);
}

LoadResult Checkpointer::load_from(const std::string& folder, const std::string& model_config_hash, int64_t step) {
  return load_step_dir(resolve_on_rank0(folder, step), &model_config_hash, optimizer_);
}

LoadResult Checkpointer::load_model(const std::string& path, int64_t step) {
  return load_step_dir(resolve_on_rank0(path, step), nullptr, nullptr);
}

std::string Checkpointer::resolve_on_rank0(const std::string& path, int64_t step) {
  wait();
  model_.discard_step();  // no prefetched all-gather may outlive the shards it was gathered from
  std::string dir, error;
  if (comm_->rank() == 0) {
    try {
      if (fs::exists(join(path, detail::kMetadataFile))) {
        dir = path;
      } else {
        // Partial saves are only ours to remove in our own folder: another run may be writing elsewhere.
        if (path == options_.folder && fs::is_directory(path)) remove_partial_saves(path);
        dir = join(path, step_dir_name(detail::choose_step(path, step)));
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = detail::agree_on_error(*comm_, error);
  if (!error.empty()) throw CheckpointError("checkpoint load: " + error);
  return detail::all_gather_strings(*comm_, dir).front();
}

LoadResult Checkpointer::load_step_dir(const std::string& dir, const std::string* model_config_hash,
                                       ShardedOptimizer* optimizer) {
  LoadResult result;
  result.dir = dir;
  std::string error;
  try {
    const CheckpointMetadata meta = read_metadata(dir);
    detail::check_metadata(meta, dir);
    result.step = meta.step();
    if (model_config_hash != nullptr && meta.model_config_hash() != *model_config_hash) {
      throw CheckpointError(dir + " was saved for model config hash '" + meta.model_config_hash() +
                            "' but this run's is '" + *model_config_hash + "'");
    }
    const auto [opt_name, state_names] = optimizer_kind(optimizer);
    if (optimizer != nullptr && meta.optimizer() != opt_name) {
      throw CheckpointError(dir + " holds optimizer state of '" +
                            (meta.optimizer().empty() ? "none (a model-only save)" : meta.optimizer()) +
                            "' but this run uses '" + opt_name + "'");
    }
    detail::check_tensors_match(meta, detail::full_tensor_refs(model_, state_names), dir);
    read_shards(meta, detail::tensor_refs(model_, state_names), dir, optimizer);
    result.saved_shard_degree = meta.shard_degree();
    result.saved_replicate_degree = meta.replicate_degree();
    result.optimizer_steps = meta.optimizer_steps();
    for (const auto& [k, v] : meta.training_state()) result.training_state[k] = v;
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = detail::agree_on_error(*comm_, error);
  if (!error.empty()) throw CheckpointError("checkpoint load: " + error);
  if (optimizer != nullptr) optimizer->set_steps_taken(result.optimizer_steps);
  return result;
}

void Checkpointer::read_shards(const CheckpointMetadata& meta, const std::vector<detail::TensorRef>& refs,
                               const std::string& dir, ShardedOptimizer* optimizer) {
  std::unordered_map<std::string, int> by_key;  // role + "/" + name -> tensor index
  for (int i = 0; i < meta.tensors_size(); ++i) by_key[meta.tensors(i).role() + "/" + meta.tensors(i).name()] = i;
  detail::ShardReader reader(dir, meta);
  for (const auto& r : refs) {
    if (r.role != 0 && optimizer == nullptr) continue;
    const auto it = by_key.find(r.role_name + "/" + r.name);
    if (it == by_key.end()) throw CheckpointError(dir + " has no " + r.role_name + " for parameter '" + r.name + "'");
    const auto& pl = model_.unit(r.unit).layout().params().at(static_cast<size_t>(r.param));
    std::span<float> dst = detail::shard_of(model_, optimizer, r);
    std::fill(dst.begin(), dst.end(), 0.f);  // padding rows stay zero
    reader.read_rows(meta.tensors(it->second), pl.rows_of(model_.unit(r.unit).shard_rank()), pl.row_numel, dst,
                     "parameter '" + r.name + "' (" + r.role_name + ")");
  }
}

}  // namespace fsdp::runtime::checkpoint
