// A job as every layer below its entry point sees it: the model, how it trains (the policy) and where
// (the mesh, expert parallelism included). An entry point builds one (the TOML reader, fsdp-plan's
// flags, the Python front end, FsdpModel's callers) and validates it once; the layers take it, or its
// parts, by const reference.
//
//   TOML / flags / fully_shard  ->  JobSpec  ->  validate(job)  ->  planner, FsdpModel, process groups
//
// The rules that tie the parts together live here and nowhere else, one function and one error text
// each, naming the key a user sets (TorchTitan's JobConfig name where it has one).
#pragma once

#include <cstdint>
#include <utility>

#include "spec/fault_tolerance.h"
#include "spec/mesh.h"
#include "spec/model_spec.h"
#include "spec/policy.h"

namespace fsdp::spec {

struct JobSpec {
  ModelSpec model;
  Policy policy;
  Mesh mesh;  // replicate x shard over the world, with the expert-parallel degree
  FaultTolerance fault_tolerance;  // its redundancy is policy.redundancy's source
};

// Every rule below, the model's own checks and the policy's, for the whole job; throws one SpecError
// listing every broken rule, one per line, in the order the parts are given.
void validate(const JobSpec& job);

// --- The rules, one each. validate(JobSpec) runs them all; a caller that holds only some parts (a
// mesh before the model is known, a process group) runs the one it needs. ---

// The replicate and shard degrees over `world_size` ranks when one of them is kRestOfWorld (spec/mesh.h):
// {replicate, shard}. Refuses both taking the rest, a given degree that does not divide the world, and
// (check_mesh_fills_world) degrees whose product is not the world.
std::pair<int64_t, int64_t> resolve_degrees(int64_t replicate, int64_t shard, int64_t world_size);
// The mesh covers exactly the ranks of the job: replicate x shard == world size.
void check_mesh_fills_world(int64_t replicate, int64_t shard, int64_t world_size);
// A reshard group (FSDP2's integer reshard_after_forward, ZeRO++'s hpZ) divides the shard degree.
void check_reshard_group(const Reshard& reshard, int64_t shard_degree);
// The expert-parallel degree is at least 1 and divides the shard degree (each expert is FSDP-sharded
// over shard degree / ep ranks).
void check_expert_parallel_degree(int64_t ep, int64_t shard_degree);
// That, and for ep > 1 a MoE model whose experts it divides.
void check_expert_parallel(const ModelSpec& model, int64_t ep, int64_t shard_degree);
// The [fault_tolerance] section's own rules, that policy.redundancy is what it keeps on the mesh (no
// mirror on HSDP), and that in-job recovery runs without expert parallelism.
void check_fault_tolerance(const JobSpec& job);

}  // namespace fsdp::spec
