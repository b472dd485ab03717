// Builds a ShardingPlan for one model, chip, mesh and policy: the layout of every shard, bytes per rank,
// communication per step, and predicted step time and MFU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sharding/chip_profile.h"
#include "sharding/step_program.h"
#include "spec/mesh.h"
#include "spec/model_spec.h"
#include "spec/policy.h"
#include "spec/shard_layout.h"

namespace fsdp::sharding {

inline constexpr double kDefaultHeadroom = 0.10;  // fraction of chip memory left for allocator slack

struct MemoryEstimate {  // bytes per rank
  int64_t param_shards = 0;
  int64_t grad_shards = 0;
  int64_t optimizer_state = 0;
  int64_t all_gather_buffers = 0;
  int64_t reduce_scatter_buffers = 0;
  int64_t unsharded_params = 0;
  int64_t unsharded_grads = 0;
  int64_t kept_params = 0;
  int64_t activations = 0;
  // The most bytes live at once, from replaying the runtime's allocations over a step
  // (simulate_memory); the transient terms above are each category's own maximum, which need not
  // coincide, so peak <= model_states() + all of them.
  int64_t peak_bytes = 0;
  // Buddy redundancy (spec::Redundancy::kBuddy, runtime/buddy_mirror.h); 0 without it. `redundancy`:
  // the mirror of rank r + 1's master shard and optimizer state, always live (in the peak's base, not in
  // model_states()); `redundancy_grads`: its received fp32 grad shard, from the exchange to the mirror's
  // update, plus as much again during the exchange (the packed copy of the rank's own sent), in the peak
  // where they live.
  int64_t redundancy = 0;
  int64_t redundancy_grads = 0;

  int64_t model_states() const { return param_shards + grad_shards + optimizer_state; }
  int64_t peak() const { return peak_bytes; }
};

struct CommEstimate {
  std::string collective;  // all_gather_forward, all_gather_backward, reduce_scatter, all_reduce
  spec::LinkLevel level = spec::LinkLevel::kIntra;
  int64_t group_size = 1;
  int64_t calls = 0;         // per step
  int64_t buffer_bytes = 0;  // per step, full buffers
  double bytes_sent_per_rank = 0;
  double seconds = 0;  // per step, before overlap
};

// From the schedule simulator (sharding/schedule_sim.h) replaying the runtime's step.
struct TimeEstimate {  // seconds per optimizer step
  double compute = 0;  // forward and backward at full rate (recompute included)
  double recompute = 0;
  double communication = 0;
  double exposed_communication = 0;  // the training thread waiting for collectives (all-to-alls included)
  double all_to_all = 0;             // expert parallelism's token exchange, waited for by compute
  double optimizer = 0;
  double mxfp8_codec = 0;  // MXFP8 quantise and decode on the training thread (alone, before contention)
  double redundancy = 0;   // buddy redundancy: the grad shard exchange and the mirror's update (in step)
  double step = 0;
  double model_flops_per_rank = 0;
  double mfu = 0;
  double tokens_per_s = 0;
};

struct PlanEstimate {
  MemoryEstimate memory;
  std::vector<CommEstimate> comm;
  TimeEstimate time;
  int64_t capacity_bytes = 0;
  int64_t available_bytes = 0;  // capacity less headroom
  bool fits = false;
};

// Memory, communication and time for a layout already computed for mesh.shard_degree(). Cheap: the
// auto-planner calls it for thousands of candidates. Throws PlanError for an invalid policy. `schedule`,
// when given, receives the step the time comes from (for simulate_step with record: the trace).
// Under expert parallelism (mesh.expert_parallel_degree() > 1) `model` is the units one rank holds
// (rank_units) and `units` their layouts (shard_rank_units): every EP rank's are the same size.
PlanEstimate estimate_plan(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units,
                           const ChipProfile& chip, const spec::Mesh& mesh, const spec::Policy& policy, double headroom,
                           StepSpec* schedule = nullptr);

// The units one rank holds for `model` on `mesh` (expert_parallel_units of EP rank 0; the model itself
// without expert parallelism), and their layouts. Throws PlanError for an EP degree the model refuses.
spec::ModelSpec rank_units(const spec::ModelSpec& model, const spec::Mesh& mesh);
std::vector<spec::UnitShardLayout> shard_rank_units(const spec::ModelSpec& rank_units, const spec::Mesh& mesh);

struct Plan {
  spec::ModelSpec model;  // the whole model
  spec::Mesh mesh;
  ChipProfile chip;
  spec::Policy policy;
  double headroom = kDefaultHeadroom;
  std::vector<spec::UnitShardLayout> units;  // of rank_model's units
  PlanEstimate estimate;
  std::vector<std::string> notes;
  spec::ModelSpec rank_model;  // rank_units(model, mesh): the units the layouts describe
  StepSpec schedule;     // the simulated step the time estimate comes from

  int64_t global_batch() const { return mesh.world_size() * policy.micro_batch * policy.grad_accum; }
};

// Validates everything (model, chip, mesh, policy, headroom in [0, 1)) and builds the plan.
Plan make_plan(const spec::ModelSpec& model, const ChipProfile& chip, const spec::Mesh& mesh,
               const spec::Policy& policy, double headroom = kDefaultHeadroom);

// Gradient-accumulation steps for a global batch (sequences per optimizer step over all ranks); throws
// PlanError when it is not a multiple of world size x micro-batch.
int64_t grad_accum_for(int64_t global_batch, int64_t world_size, int64_t micro_batch);

}  // namespace fsdp::sharding
