// Buddy redundancy for plain FSDP (docs/fault_tolerance.md, spec/fault_tolerance.h kBuddy): rank r of a
// shard group of S >= 2 keeps a mirror of the master shard and optimizer state of rank (r + 1) % S, so a
// lost rank's shard survives at (r - 1 + S) % S. The mirror is not copied each step: the buddy receives
// the owner's reduced, clipped gradient shard (1/S of the model, fp32) and applies the same optimizer
// arithmetic (ShardedOptimizer::update_shard), which keeps it bitwise equal to the owner's.
//
//   BuddyMirror mirror(model, optimizer, tracker);
//   mirror.sync();                    // after init_parameters or a checkpoint load (collective)
//   per step: backward -> finalize_backward -> mirror.begin_exchange() (collective) -> clip_grad_norm ->
//             mirror.end_exchange(FsdpModel::clip_scale(norm, max_norm)) -> optimizer.step ->
//             mirror.apply(lr) -> zero_grad
//   (or, after clip_grad_norm, exchange_grads(): both at once, nothing left to clip)
//
// The exchange runs while the step's loss and gradient norm are all-reduced: it carries the gradients
// before clipping, and end_exchange clips the received copy with the owner's factor (the same fp32
// multiply, so bitwise the same values).
// Memory (MemoryCategory::kRedundancy): (1 + state_count) x the rank's shard elements in fp32, always;
// plus the received gradient shard (shard elements, fp32) from begin_exchange until apply, and from
// begin_exchange to end_exchange a packed copy of the rank's own grad shards (one message each way).
// Traffic: over the shard group's reduce communicator (groups().shard_reduce), whose reduce-scatters
// have all finished once finalize_backward returned; point-to-point calls start at once, never queued
// behind the next step's prefetched all-gathers, which run on shard_gather.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/memory_tracker.h"
#include "runtime/fsdp_model.h"
#include "runtime/optimizer.h"

namespace fsdp::runtime {

class BuddyMirror {
 public:
  // Allocates the mirror (zeroed; sync() fills it). Throws std::invalid_argument for HSDP (replicate
  // > 1: the replicas already hold every shard), expert parallelism, or a shard group of one rank.
  BuddyMirror(FsdpModel& model, ShardedOptimizer& opt, MemoryTracker& tracker);
  // Waits for an exchange still in flight (a step that failed between begin and end), errors ignored:
  // the buffers it writes into must outlive it.
  ~BuddyMirror();
  BuddyMirror(const BuddyMirror&) = delete;
  BuddyMirror& operator=(const BuddyMirror&) = delete;

  // Collective over the shard group: every rank sends its master shards and optimizer state to the rank
  // mirroring it, (r - 1 + S) % S, and receives those of rank (r + 1) % S into the mirror.
  void sync();
  // Collective over the shard group: starts sending this rank's grad shards (a packed copy, taken now:
  // call after finalize_backward, before zero_grad) and receiving the buddy's into a transient buffer
  // that apply() or drop_grads() frees. Nothing waits; end_exchange must follow before the next call.
  void begin_exchange();
  // Waits for the exchange begun, frees the packed copy and multiplies the received gradients by
  // `clip_scale` (the owner's FsdpModel::clip_scale; 1 when they were sent clipped).
  void end_exchange(float clip_scale);
  // begin_exchange and end_exchange(1): the exchange of gradients already clipped.
  void exchange_grads();
  // Frees the received gradients unapplied (a skipped step).
  void drop_grads() { grads_.release(); }
  // The optimizer update of the mirror with the received gradients, at the optimizer's step count: call
  // it after optimizer.step(), so steps_taken() is the step just taken (the owner's bias correction).
  void apply(double lr);
  // The same at an explicit 1-based step count (the caller applies before optimizer.step, or replays).
  void apply(double lr, int64_t step);
  bool holds_grads() const { return !grads_.empty(); }

  int mirrored_rank() const { return mirrored_; }  // shard rank whose state this rank mirrors
  int mirror_holder() const { return holder_; }    // shard rank that mirrors this rank's state
  std::span<float> params(int unit);
  std::vector<std::span<float>> state(int unit);

 private:
  void post_exchange(std::vector<Work>& works, const std::vector<std::span<const float>>& own,
                     const std::vector<std::span<float>>& mirror);

  FsdpModel& model_;
  ShardedOptimizer& opt_;
  MemoryTracker& tracker_;
  Communicator& comm_;
  int mirrored_ = 0;
  int holder_ = 0;
  std::vector<int64_t> offsets_;  // unit u's chunk in the packed grad buffers (prefix sums of chunk_numel)
  std::vector<TrackedBuffer<float>> params_;              // per unit, chunk_numel
  std::vector<std::vector<TrackedBuffer<float>>> state_;  // per unit, state_count buffers of chunk_numel
  TrackedBuffer<float> grads_;                            // the buddy's grad shards, every unit, while held
  TrackedBuffer<float> packed_;                           // this rank's grad shards, while the exchange runs
  std::vector<Work> exchange_;                            // its sends and receives (after the buffers)
};

}  // namespace fsdp::runtime
