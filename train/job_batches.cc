#include "train/job_batches.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fsdp::train {

JobBatches::JobBatches(std::shared_ptr<const TokenSource> source, const DataLoaderOptions& own)
    : source_(std::move(source)), options_(own), own_(source_, own) {}

// The loader of `data_rank`, standing at (step, micro): a step redone after a lost rank, or rows taken
// over from one, move it there first.
DataLoader& JobBatches::loader_at(int64_t data_rank, int64_t step, int64_t micro) {
  DataLoader* loader = &own_;
  if (data_rank != options_.dp_rank) {
    auto it = others_.find(data_rank);
    if (it == others_.end()) {
      DataLoaderOptions o = options_;
      o.dp_rank = data_rank;
      it = others_.emplace(data_rank, DataLoader(source_, o)).first;
    }
    loader = &it->second;
  }
  const DataLoaderState at = loader->state();
  if (at.step != step || at.micro_step != micro) loader->restore(own_.state_at(step, micro));
  return *loader;
}

BatchSource JobBatches::source() {
  return [this](int64_t step, int64_t micro, int64_t data_rank, int32_t* inputs, int32_t* targets) {
    loader_at(data_rank, step, micro).next(batch_);
    std::copy(batch_.inputs.begin(), batch_.inputs.end(), inputs);
    std::copy(batch_.targets.begin(), batch_.targets.end(), targets);
  };
}

}  // namespace fsdp::train
