// The FSDP step engine for one rank: fully_shard applied to every unit of a model, driven through
// FSDP2's lifecycle hooks. A training loop (TorchTitan style) calls, per micro-batch:
//
//   for u in 0..n-1:   w = fsdp.pre_forward(u);  model.forward(u, w, ...);  fsdp.post_forward(u);
//   for u in n-1..0:   w = fsdp.pre_backward(u); model.backward(u, w, fsdp.grads(u), ...); fsdp.post_backward(u);
//   fsdp.finalize_backward();
//
// then fsdp.clip_grad_norm(max_norm), optimizer.step(fsdp, lr), fsdp.zero_grad().
//
// pre_forward waits for this unit's all-gather and starts the next `prefetch` units' (they run on the
// progress engine while this unit computes); post_forward reshards per reshard_after_forward;
// pre_backward gathers again if needed and prefetches the previous units; post_backward starts the
// gradient reduce-scatter (it overlaps the next unit's backward) unless gradient sync is off for
// accumulation; finalize_backward waits for the last reduce-scatter. What to start, keep and finish
// when is runtime/fsdp_schedule.h's (units 0..n-1 in that order), the same schedule fully_shard follows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "collectives/communicator.h"
#include "common/memory_tracker.h"
#include "runtime/fsdp_schedule.h"
#include "runtime/fsdp_unit.h"
#include "runtime/grad_clip.h"
#include "runtime/process_groups.h"
#include "spec/mesh.h"
#include "spec/model_spec.h"
#include "spec/policy.h"

namespace fsdp::proto {
class ShardingPlan;
}

namespace fsdp::runtime {

struct FsdpOptions {
  // replicate x shard over the world (HSDP: gradients all-reduced across replicas) and the expert-parallel
  // degree of a MoE model (> 1 splits the experts over groups of that many shard ranks; the model's units
  // then become spec::expert_parallel_units of this rank); unset: one shard group of the whole world.
  // Its world size must be the communicator's (spec::Mesh::for_world).
  std::optional<spec::Mesh> mesh;
  spec::Policy policy;  // param/reduce dtypes, reshard_after_forward, prefetch
  // A plan from the planner or a file (`fsdp-plan --out`, runtime/plan_check.h). When given, the
  // constructor refuses it (PlanMismatch naming every difference) unless it describes exactly this
  // model, mesh and policy. Without one, the layout is the planner's for the options above
  // (spec::UnitShardLayout), which is what such a plan would hold.
  std::shared_ptr<const proto::ShardingPlan> plan;
};

class FsdpModel {
 public:
  // Collective over `world` (splits the process groups). Allocates the sharded state, zeroed.
  FsdpModel(const spec::ModelSpec& model, const FsdpOptions& options, Communicator& world, MemoryTracker& tracker);
  FsdpModel(const FsdpModel&) = delete;  // units hold references into it
  FsdpModel& operator=(const FsdpModel&) = delete;

  int num_units() const { return static_cast<int>(units_.size()); }
  FsdpUnit& unit(int u) { return *units_.at(static_cast<size_t>(u)); }
  const ProcessGroups& groups() const { return groups_; }
  const spec::Mesh& mesh() const { return groups_.mesh; }
  const spec::Policy& policy() const { return options_.policy; }
  // The units this rank holds: the model given, or under expert parallelism its dense units and this
  // rank's expert units (spec::expert_parallel_units).
  const spec::ModelSpec& model() const { return model_; }
  // Expert parallelism: the groups of the expert units (the EP group is expert_groups().expert_parallel);
  // without it, groups().
  int64_t expert_parallel() const { return expert_parallel_; }
  // The model as given, whatever this rank holds of it: checkpoints name its tensors.
  const spec::ModelSpec& full_model() const { return full_model_; }
  const ProcessGroups& expert_groups() const { return expert_parallel() > 1 ? expert_groups_ : groups_; }

  // Fills every unit's master shard: fn writes the unit's full parameters (param-major, spec order)
  // into the views it is given. Every rank must produce the same values (seeded, rank-independent).
  void init_parameters(const std::function<void(int unit, std::span<float* const> params)>& fn);

  // --- FSDP2 lifecycle ---
  std::span<const float* const> pre_forward(int u);
  void post_forward(int u);
  std::span<const float* const> pre_backward(int u);
  std::span<float* const> grads(int u) { return unit(u).grads(); }
  void post_backward(int u);
  void finalize_backward();

  // FSDP2's set_requires_gradient_sync: false keeps full gradients across micro-batches (no
  // reduce-scatter) until a backward with sync on.
  void set_requires_gradient_sync(bool sync) { sync_grads_ = sync; }
  bool requires_gradient_sync() const { return sync_grads_; }

  // The global norm_type-norm of the sharded gradients (one all-reduce over the shard group); scales
  // them by runtime::clip_scale when above max_norm (max_norm <= 0: no clipping). Returns the norm before
  // clipping. runtime/grad_clip.h, which fully_shard's clip_grad_norm_ calls too.
  double clip_grad_norm(double max_norm, double norm_type = 2.0);
  // The factor clip_grad_norm multiplies every gradient by at this norm (runtime::clip_scale): a copy of
  // a grad shard taken before clipping (BuddyMirror::begin_exchange) is clipped bitwise alike.
  static float clip_scale(double norm, double max_norm) { return runtime::clip_scale(norm, max_norm); }
  void zero_grad();
  // Drops all transient buffers and unsharded gradients (after an abandoned step).
  void discard_step();

  // The full fp32 parameters of unit u in param-major order, gathered from the master shards
  // (collective over the unit's shard group: the expert FSDP group for an expert unit): for tests, equivalence checks and exports.
  std::vector<float> gather_full_parameters(int u);

  void set_comm_observer(CommObserver observer);
  // Told of every collective the units issue, in issue order (tests of the schedule).
  void set_issue_observer(IssueObserver observer);
  const FsdpSchedule& schedule() const { return schedule_; }

  // The next step's forward prefetch, called once unit u's shard holds its new values (after the
  // optimizer updated it): starts the all-gathers the next pre_forward(0) would wait on first (unit 0
  // and the `prefetch` units after it), so they overlap the optimizer's remaining work instead of
  // opening the next forward exposed. Nothing happens with prefetch 0. Anything that rewrites master
  // shards afterwards (a checkpoint load, an import) must call discard_step() first.
  void prefetch_next_step(int u);

 private:
  spec::ModelSpec model_;
  spec::ModelSpec full_model_;
  FsdpOptions options_;
  int64_t expert_parallel_ = 1;  // the mesh's
  MemoryTracker& tracker_;
  ProcessGroups groups_;
  ProcessGroups expert_groups_;  // expert parallelism only
  std::vector<std::unique_ptr<FsdpUnit>> units_;
  bool sync_grads_ = true;
  FsdpSchedule schedule_;
  CommObserver observer_;
  IssueObserver issue_observer_;
};

}  // namespace fsdp::runtime
