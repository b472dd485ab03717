// The fsdp-train job on one rank, from a validated TrainConfig and a connected world: the trainer,
// the data loader, metrics, the trace, checkpoints (resume, periodic and final saves) and the summary.
// tools/fsdp_train.cc wraps it with start-up; tests call it on in-process ranks.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/host_memory.h"
#include "launch/elastic_world.h"
#include "sharding/chip_profile.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace fsdp::train {

// The trainer's options for this configuration (model, batch, policy, optimizer, schedule).
TrainerOptions trainer_options(const TrainConfig& config);

// What rank `rank` of this (validated) configuration's job reads: its data-parallel rows, the batch
// shape, the seed. The Python front end (python/fsdp_runtime/train.py) reads through the same loader.
DataLoaderOptions data_loader_options(const TrainConfig& config, int rank);

// The metrics logger of rank `rank`: the console line (printed on rank 0, or every rank with
// metrics.save_for_all_ranks, when `log` is set), the per-step file, the FLOP and memory figures.
MetricsOptions job_metrics_options(const TrainConfig& config, int rank, std::ostream* log);

// A fingerprint of what makes checkpoints compatible: the model's dimensions and parameter shapes.
std::string model_config_hash(const TrainConfig& config);

struct JobResult {
  std::vector<StepStats> steps;  // the steps this run took (after any resume)
  int64_t start_step = 0;        // the step a checkpoint resumed from (0: fresh)
  int64_t peak_bytes = 0;        // runtime-tracked peak on this rank
  int64_t planned_peak_bytes = 0;
  int64_t peak_reserved_bytes = 0;  // held from the system by the tracker's block cache (>= peak_bytes)
  // Over the steps after the first: blocks the cache had to get from or give back to the system (0 in
  // a steady state) and the process's minor page faults per step.
  int64_t steady_system_allocations = 0;
  int64_t steady_system_frees = 0;
  double page_faults_per_step = 0;
  std::map<std::string, double> hidden_fraction;  // per collective kind, over steps after the first
  double seconds_per_step = 0;                     // median over steps after the first
  // Expert parallelism: seconds per step in the tokens' all-to-alls (counts and rows), median over the
  // steps after the first. Blocking: the compute waits for them, none of it is hidden.
  double all_to_all_seconds_per_step = 0;
  std::vector<std::vector<float>> final_parameters;  // per unit, when requested (collective)
};

struct JobOptions {
  std::ostream* log = nullptr;  // console lines (rank 0, or every rank with save_for_all_ranks); null: none
  bool gather_final_parameters = false;
  int64_t stop_after_step = 0;  // > 0: stop after this step (tests: a run "crashing" after a save)
  // fault_tolerance.enable: the world the job runs over, which a lost rank shrinks (the `world` argument
  // must be its communicator); null: a lost rank ends the job.
  launch::ElasticWorld* elastic = nullptr;
  // Where a rank that becomes rank 0 after rank 0 was lost prints (it then also continues metrics.file).
  std::ostream* console = nullptr;
};

// Collective over `world`. Throws ConfigError, CommError, NonFiniteLoss, checkpoint errors.
JobResult run_training_job(const TrainConfig& config, Communicator& world, const JobOptions& options = {});

}  // namespace fsdp::train
