// Searches shard and replicate degrees, the expert-parallel degree of a MoE model, reshard policy, prefetch depth,
// activation checkpointing and micro-batch for the fastest predicted plan that fits in memory with headroom, and says
// why it won (or, when nothing fits, by how much and what would).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sharding/planner.h"

namespace fsdp::sharding {

struct AutoPlanOptions {
  int64_t nodes = 1;
  int64_t chips_per_node = 1;
  int64_t global_batch = 0;  // sequences per step; 0: one per rank
  double headroom = kDefaultHeadroom;
  size_t top = 5;  // candidates reported
  spec::Policy base;  // dtypes, optimizer and seq_len are kept; the rest is searched
  std::vector<int64_t> prefetch_choices = {0, 1, 2};
  int64_t max_micro_batch = 64;
  // Expert-parallel degrees to try (each only where it divides the shard degree and the experts);
  // empty: every divisor of a MoE model's num_experts, 1 for a dense model.
  std::vector<int64_t> expert_parallel_choices;
  // MXFP8 on the wire changes the numerics, so it is searched only when allowed: then the all-gathers and
  // the reduce-scatters each may carry MXFP8 or the default (not the reduce-scatters under expert
  // parallelism, which the runtime refuses). Otherwise base's param_comm and grad_comm are kept as given.
  bool allow_mxfp8 = false;
};

struct AutoCandidate {
  spec::Mesh mesh;
  spec::Policy policy;
  PlanEstimate estimate;
  // "shard 144 x replicate 1, reshard true, prefetch 1, ac full, mb 1 x 8" (", expert parallel 8" after the
  // shard degree when it is > 1; ", mxfp8 all-gathers" / "reduce-scatters" at the end when they are)
  std::string describe() const;
};

struct AutoPlanResult {
  std::optional<Plan> best;        // empty when nothing fits
  std::vector<AutoCandidate> top;  // fastest fitting first; when nothing fits, smallest peak first
  int64_t evaluated = 0;
  int64_t fitting = 0;
  std::string explanation;
};

// Throws PlanError for bad input (mesh sizes, a global batch that does not split evenly over ranks).
AutoPlanResult auto_plan(const spec::ModelSpec& model, const ChipProfile& chip, const AutoPlanOptions& options);

}  // namespace fsdp::sharding
