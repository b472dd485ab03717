// The job's data on one rank: a loader for each data rank whose rows it computes. Without a lost rank that
// is its own (train/dataset.h: rank r reads rows [r * B, (r + 1) * B) of each global micro-batch); after
// one, the rows it took over (TrainerOptions::data_ranks). Positions are a function of the step, so a
// loader made late, or a step redone after a lost rank, starts where the global sample order says.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "train/dataset.h"
#include "train/trainer.h"

namespace fsdp::train {

class JobBatches {
 public:
  JobBatches(std::shared_ptr<const TokenSource> source, const DataLoaderOptions& own);
  JobBatches(const JobBatches&) = delete;
  JobBatches& operator=(const JobBatches&) = delete;

  // The trainer's batches: micro-batch (step, micro) of `data_rank`'s rows.
  BatchSource source();
  // This rank's own loader: a checkpoint load restores its position.
  DataLoader& own() { return own_; }
  // The position after `step`, as checkpoints save it (the same whichever rank saves it).
  DataLoaderState position_after(int64_t step) const { return own_.state_at(step + 1, 0); }

 private:
  DataLoader& loader_at(int64_t data_rank, int64_t step, int64_t micro);

  std::shared_ptr<const TokenSource> source_;
  DataLoaderOptions options_;
  DataLoader own_;
  std::map<int64_t, DataLoader> others_;
  Batch batch_;
};

}  // namespace fsdp::train
