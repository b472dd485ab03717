// Distributed checkpoints of an FsdpModel and its ShardedOptimizer (docs/checkpoints.md).
//
//   Checkpointer ckpt(fsdp, &optimizer, world, {.folder = "out/checkpoint", .keep_latest_k = 3}, tracker);
//   if (resume) state = ckpt.load(config_hash).training_state;     // any shard degree saved at
//   ... every `interval` steps:  ckpt.save(step, config_hash, {{"data_loader", bytes}, ...});
//   ckpt.wait();                                                      // before exit (async mode)
//
// Save: each rank of HSDP replica 0 writes its rows of every parameter and optimizer state tensor
// (padding never stored) into one shard file of <folder>/.tmp-step-<N>-<nonce>; rank 0 gathers the
// writers' checksums, writes metadata.pb, fsyncs, renames the directory to step-<N> and moves the
// `latest` pointer. Load: every rank reads only the rows it owns at its current shard degree, verifying
// the checksum blocks it reads.
//
// save(), load() and the constructor are collective over the world communicator's ranks; they talk on
// a communicator of their own (split once here), so they never queue behind training collectives.
// Errors are agreed on: when one rank fails, every rank throws CheckpointError with that rank's reason.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/fsdp_model.h"
#include "common/memory_tracker.h"
#include "runtime/optimizer.h"

namespace fsdp::proto::checkpoint {
class CheckpointMetadata;
}
namespace fsdp::runtime::checkpoint::detail {
struct TensorRef;
}

namespace fsdp::runtime::checkpoint {

// Opaque per-run state the trainer owns (data-loader position, LR-scheduler step, RNG states): key ->
// bytes. Stored verbatim in the metadata.
using TrainingState = std::map<std::string, std::string>;

// TorchTitan's [checkpoint] keys where they mean the same (folder, keep_latest_k, async_mode); interval
// and load_step belong to the trainer's loop and to load().
struct CheckpointOptions {
  std::string folder;                  // holds step-<N>/ directories and the `latest` pointer
  int64_t keep_latest_k = 0;           // after a commit, delete all but the newest k steps; 0 keeps all
  bool async = false;                  // snapshot to host memory, write on a background thread
  int64_t checksum_block_bytes = 1 << 20;  // granularity of partial-read verification
};

struct LoadResult {
  int64_t step = 0;
  std::string dir;  // the step directory read
  int64_t saved_shard_degree = 0;
  int64_t saved_replicate_degree = 0;
  int64_t optimizer_steps = 0;
  TrainingState training_state;
};

class Checkpointer {
 public:
  // Collective over `world` (splits the checkpoint communicator). optimizer may be null: then only
  // parameters are saved and loaded.
  Checkpointer(FsdpModel& model, ShardedOptimizer* optimizer, Communicator& world, CheckpointOptions options,
               MemoryTracker& tracker);
  // Waits for an async save in flight; its error, if any, is printed to stderr (call wait() to see it).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective. Saves the current shards as step `step`. A committed step-<step> is never touched:
  // saving a step that exists throws before anything is written. In async mode this returns once the
  // shards are copied to host memory (counted as MemoryCategory::kOther); the write and the commit
  // finish on a background thread, and the next save()/load()/wait() waits for them first.
  // model_only: parameters only, no optimizer state (TorchTitan's last_save_model_only); such a step
  // loads with load_model(), and load() refuses it naming the missing optimizer state.
  void save(int64_t step, const std::string& model_config_hash, const TrainingState& state = {},
            bool model_only = false);
  // Waits for the async save in flight (no-op otherwise) and rethrows its error.
  void wait();
  bool save_in_flight() const { return writer_.joinable(); }

  // Collective. Loads step `step` (-1: the `latest` pointer, or the highest committed step when the
  // pointer is missing or stale) onto the model's current layout, whatever shard and replicate degrees
  // it was saved at. Removes partial .tmp-* directories first. Refuses (CheckpointError naming the
  // mismatch) a checkpoint whose model_config_hash, parameter names or shapes, or optimizer kind differ.
  // Sets the optimizer's step count. Throws when no checkpoint exists: check latest_step() first.
  LoadResult load(const std::string& model_config_hash, int64_t step = -1);
  // The same from another run's checkpoint folder, or one of its step directories (TorchTitan's
  // initial_load_path with initial_load_model_only = false): nothing there is modified, partial saves
  // included.
  LoadResult load_from(const std::string& folder, const std::string& model_config_hash, int64_t step = -1);

  // Collective. Parameters only (TorchTitan's initial_load_model_only): `path` is a step directory or
  // a checkpoint folder (then `step`, -1: the latest). The optimizer, its step count and the model
  // config hash are left alone; names and shapes must match. result.step and training_state are the
  // saved ones, for the caller to ignore.
  LoadResult load_model(const std::string& path, int64_t step = -1);

  // The checkpoint communicator (all ranks of world, same order): safetensors export/import use it too.
  Communicator& comm() { return *comm_; }
  const CheckpointOptions& options() const { return options_; }

 private:
  struct SaveJob;
  void run_save(SaveJob& job);  // write, gather checksums, commit; collective over comm_
  // Every rank's rows of every tensor it holds, in the current layout, from a checked step directory.
  // optimizer null: parameters only.
  void read_shards(const proto::checkpoint::CheckpointMetadata& meta, const std::vector<detail::TensorRef>& refs,
                   const std::string& dir, ShardedOptimizer* optimizer);
  // Rank 0 picks the step directory (`path` itself when it holds metadata.pb, else its step `step`);
  // every rank gets it.
  std::string resolve_on_rank0(const std::string& path, int64_t step);
  // model_config_hash null: not checked; optimizer null: parameters only.
  LoadResult load_step_dir(const std::string& dir, const std::string* model_config_hash, ShardedOptimizer* optimizer);

  FsdpModel& model_;
  ShardedOptimizer* optimizer_;
  CheckpointOptions options_;
  MemoryTracker& tracker_;
  std::unique_ptr<Communicator> comm_;
  std::thread writer_;
  std::exception_ptr writer_error_;
};

// --- the folder, without communication ---
std::string step_dir_name(int64_t step);  // "step-<step>"
// Steps with a committed directory (step-<N> holding metadata.pb), ascending.
std::vector<int64_t> committed_steps(const std::string& folder);
// The step `latest` names when it is committed, else the highest committed step; nullopt when none.
std::optional<int64_t> latest_step(const std::string& folder);
// Removes partial saves (.tmp-* entries) left by a crash; returns how many. Only safe while no save
// into `folder` is in flight (load() calls it on rank 0).
int remove_partial_saves(const std::string& folder);

// The optimizer's name and state tensor names as checkpoints record them: ("adamw", {"exp_avg",
// "exp_avg_sq"}), ("sgd_momentum", {"momentum"}), ("", {}) for null.
std::pair<std::string, std::vector<std::string>> optimizer_kind(ShardedOptimizer* optimizer);

}  // namespace fsdp::runtime::checkpoint
