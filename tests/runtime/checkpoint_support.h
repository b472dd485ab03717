// Shared by the checkpoint tests: a toy-model training job (FsdpModel + optimizer) one rank drives,
// full-state snapshots to compare layouts bitwise, and scratch folders.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/fsdp_model.h"
#include "runtime/optimizer.h"
#include "toy_model.h"

namespace fsdp::testing {

struct ToyJob {
  // Collective over world. replicate > 1: HSDP with shard degree world / replicate.
  explicit ToyJob(Communicator& world, int64_t replicate = 1, bool sgd = false, ToyModel toy = ToyModel{});

  // One optimizer step on global batch `s` (0-based, 24 samples split over the world); returns the
  // world-averaged loss.
  double step(int64_t s);

  // Full (unsharded, param-major) parameters and optimizer state of every unit, gathered over the
  // shard group: index [unit][0] = parameters, [unit][k] = state k - 1.
  std::vector<std::vector<std::vector<float>>> full_state();

  Communicator& world;
  ToyModel toy;
  MemoryTracker tracker;
  std::unique_ptr<runtime::FsdpModel> fsdp;
  std::unique_ptr<runtime::ShardedOptimizer> opt;
};

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace fsdp::testing
