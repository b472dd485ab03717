// One rank's training loop over the reference Llama model and the FSDP runtime: per optimizer step,
// grad_accum micro-batches of forward (units in order) and backward (units in reverse) through the
// FSDP2 hooks, then gradient clipping, the optimizer and the learning-rate schedule.
//
//   Trainer trainer(options, world, batches);
//   for (int64_t s = 1; s <= options.steps; ++s) StepStats st = trainer.step();
//
// Every rank must run the same number of steps; batches(step, micro, data_rank, inputs, targets) must hand
// each data-parallel rank its own rows of the global batch (train/dataset.h does). After a lost rank
// (fault_tolerance) a survivor computes the rows of several data ranks, so the global batch stays whole.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "common/memory_tracker.h"
#include "model/dims.h"
#include "model/init.h"
#include "runtime/buddy_mirror.h"
#include "runtime/fsdp_model.h"
#include "runtime/lr_schedule.h"
#include "runtime/optimizer.h"
#include "spec/model_spec.h"
#include "train/expert_exchange.h"

namespace fsdp::model {
class ExpertExchange;
class Embedding;
class TransformerBlock;
class OutputHead;
}  // namespace fsdp::model

namespace fsdp::train {

struct TrainerOptions {
  spec::ModelSpec model;   // a Llama spec (spec::make_llama): its dims hold the norm and RoPE settings
  double max_norm = 1.0;   // <= 0: no clipping
  // The mesh and the policy: dtypes, reshard, prefetch, checkpointing, the optimizer, and the batch shape
  // (micro_batch sequences of seq_len tokens per rank, grad_accum micro-batches per optimizer step).
  runtime::FsdpOptions fsdp;
  runtime::AdamWConfig adamw;
  runtime::SgdConfig sgd;
  runtime::LrSchedule lr;
  uint64_t seed = 0;  // parameter initialisation
  model::InitScheme init = model::InitScheme::kNormal;  // model.init_scheme
  bool skip_nonfinite = false;  // a NaN/Inf loss or gradient norm skips the step instead of stopping
  // The data-parallel ranks whose rows this rank computes, grad_accum micro-steps each, in order (empty: its
  // own, spec::Mesh::data_parallel_rank), out of data_parallel_size (0: the mesh's). Survivors of a lost rank
  // take its rows: the gradient and the loss stay the mean over data_parallel_size ranks' rows. Every rank
  // must list as many entries (the all-gathers of each micro-step are collective): -1 is a slot without rows,
  // run with a zero loss scale (see round_robin_data_ranks).
  std::vector<int64_t> data_ranks;
  int64_t data_parallel_size = 0;
  // Called once per step once this rank holds everything the optimizer step needs (gradients reduced and
  // clipped, the redundancy's gradients received), before anything is updated: fault tolerance's commit
  // vote. false (another rank's recovery dropped the step: step() throws AbortedError) or an exception leaves
  // the step unapplied (apply_pending_step() can still apply it when the job decides to keep it).
  std::function<bool(int64_t step)> commit;
};

// Fills one micro-batch of this rank: inputs and targets, each local_batch * seq_len tokens.
using BatchSource =
    std::function<void(int64_t step, int64_t micro, int64_t data_rank, int32_t* inputs, int32_t* targets)>;
// Told about every compute span (forward/backward of a unit, the optimizer) for the trace.
using ComputeObserver = std::function<void(std::string_view what, std::chrono::steady_clock::time_point start,
                                           std::chrono::steady_clock::time_point end)>;

struct StepStats {
  int64_t step = 0;
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double seconds = 0;
  int64_t tokens = 0;  // this rank's tokens in the step
  bool skipped = false;
};

// Data ranks 0..data_parallel_size-1 dealt round-robin over `world` ranks: rank r computes r, r + world, ...,
// padded with -1 to ceil(data_parallel_size / world) entries so every rank runs as many micro-steps.
std::vector<int64_t> round_robin_data_ranks(int64_t data_parallel_size, int64_t world, int64_t rank);

// Thrown when a step's loss or gradient norm is NaN or Inf and skip_nonfinite is off.
class NonFiniteLoss : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  // Collective over `world`: builds the FSDP state and initialises the parameters (seeded, the same
  // whatever the world size).
  Trainer(const TrainerOptions& options, Communicator& world, BatchSource batches);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  StepStats step();
  // Steps whose optimizer update this rank applied (or skipped as non-finite).
  int64_t steps_done() const { return step_; }
  // A step whose commit was interrupted (the vote threw) but that the job decided to keep: applies its
  // optimizer update from the gradients it still holds and returns its stats. Empty when none is pending.
  // `prefetch`: start the next step's first all-gathers as units are updated (not over a broken world).
  std::optional<StepStats> apply_pending_step(bool prefetch = false);
  // The redundancy (policy.redundancy = buddy on more than one rank), or null.
  runtime::BuddyMirror* mirror() { return mirror_.get(); }
  // Collective: refills the mirrors from their owners (after the shards were loaded or rebuilt).
  void sync_redundancy();
  // The rank's data ranks (TrainerOptions::data_ranks, resolved).
  const std::vector<int64_t>& data_ranks() const { return data_ranks_; }
  // After a checkpoint load: the next step() is step + 1.
  void set_steps_done(int64_t step) { step_ = step; }

  runtime::FsdpModel& fsdp() { return *fsdp_; }
  runtime::ShardedOptimizer& optimizer() { return *optimizer_; }
  MemoryTracker& tracker() { return tracker_; }
  const TrainerOptions& options() const { return options_; }
  void set_compute_observer(ComputeObserver observer) { compute_observer_ = std::move(observer); }
  // Expert parallelism's token exchanges (blocking, inside the blocks' compute spans); none without it.
  void set_exchange_observer(CommExpertExchange::Observer observer) {
    if (exchange_) exchange_->set_observer(std::move(observer));
  }

 private:
  // forward + backward of one micro-batch of data rank `data_rank`; returns its local loss
  // data_rank -1: a slot without rows (zero loss scale: it adds nothing to the gradients).
  double micro_step(int64_t step, int64_t micro, int64_t data_rank, bool last);
  void record(std::string_view what, std::chrono::steady_clock::time_point start);
  // "forward layers.2": the phase and the unit's name.
  void record(std::string_view phase, int unit, std::chrono::steady_clock::time_point start);
  // A block's parameters (or gradients): its unit's, with the rank's routed experts spliced in from
  // its expert unit under expert parallelism (model order: wq wk wv wo router, experts, the rest).
  template <class T>
  std::span<T* const> block_params(std::span<T* const> dense, std::span<T* const> experts, std::vector<T*>& out);

  // The FSDP units of block i: its own, and its expert unit under expert parallelism (-1 otherwise).
  struct BlockUnits {
    int dense = -1;
    int experts = -1;
  };

  TrainerOptions options_;
  Communicator& world_;
  BatchSource batches_;
  MemoryTracker tracker_;
  spec::ModelDims dims_;
  std::unique_ptr<runtime::FsdpModel> fsdp_;
  std::unique_ptr<CommExpertExchange> exchange_;  // expert parallelism only
  std::vector<BlockUnits> block_units_;
  std::vector<const float*> merged_params_;
  std::vector<float*> merged_grads_;
  std::unique_ptr<runtime::ShardedOptimizer> optimizer_;
  std::unique_ptr<runtime::BuddyMirror> mirror_;
  std::unique_ptr<model::Embedding> embedding_;
  std::vector<std::unique_ptr<model::TransformerBlock>> blocks_;
  std::unique_ptr<model::OutputHead> head_;
  std::vector<int32_t> inputs_, targets_;
  TrackedBuffer<float> hidden_;  // (B*T, dim): the residual stream between units
  int64_t step_ = 0;
  std::vector<int64_t> data_ranks_;
  float share_ = 1.0f;  // this world's data-parallel size over the global batch's: scales loss and gradients
  struct Pending {
    StepStats stats;  // loss, norm and lr already known
  };
  std::optional<Pending> pending_;  // gradients ready, the commit not decided
  ComputeObserver compute_observer_;
};

}  // namespace fsdp::train
