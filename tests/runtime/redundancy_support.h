// What the buddy-mirror and live-reshard tests share: a toy model trained by FSDP with a buddy mirror
// kept step by step, and the whole (unsharded) parameters and optimizer state gathered for comparison.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/communicator.h"
#include "common/memory_tracker.h"
#include "runtime/buddy_mirror.h"
#include "runtime/fsdp_model.h"
#include "runtime/optimizer.h"
#include "toy_model.h"

namespace fsdp::testing {

struct MirroredRun {
  ToyModel toy;
  MemoryTracker tracker;
  std::unique_ptr<runtime::FsdpModel> model;
  std::unique_ptr<runtime::ShardedOptimizer> opt;
  std::unique_ptr<runtime::BuddyMirror> mirror;
};

// fp32 FSDP of the toy model over `world`, AdamW or SGD with momentum and weight decay, mirrored and
// synced after init (without `mirrored`: no mirror, the same steps; `mesh`: HSDP, never mirrored).
std::unique_ptr<MirroredRun> make_mirrored_run(Communicator& world, bool sgd, bool mirrored = true,
                                               const std::optional<spec::Mesh>& mesh = std::nullopt);
std::unique_ptr<runtime::ShardedOptimizer> make_optimizer(runtime::FsdpModel& model, bool sgd, MemoryTracker& tracker);
// One training step on samples of `global_batch` per step, as the trainer orders it: forward, backward,
// begin_exchange, clip at max_norm, end_exchange with the clip's factor, optimizer.step (prefetching the
// next step's first all-gathers), apply, zero_grad. `exchange_after_clip`: exchange_grads after the clip.
void mirrored_step(MirroredRun& run, Communicator& world, int step, int64_t global_batch = 12, double max_norm = 0.3,
                   bool exchange_after_clip = false);

// Each rank sends its mirror of buffer `what` (0 params, k state k - 1) to the rank it mirrors, which
// compares it with its own bit for bit (collective); returns the differing elements this rank found.
int64_t mirror_mismatches(MirroredRun& run, int what);

// Every unit's whole parameters (what 0) or optimizer state what - 1, param-major, gathered over the
// model's shard group (collective).
std::vector<std::vector<float>> gather_whole(runtime::FsdpModel& model, runtime::ShardedOptimizer& opt, int what);

}  // namespace fsdp::testing
