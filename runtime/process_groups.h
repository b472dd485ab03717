// The communicators one rank's FSDP state uses, split once from the world communicator.
//
// Ranks follow spec::Mesh: rank = replica * shard_degree + shard_rank, so a shard group is a run
// of consecutive ranks (one server when it fits) and a replicate group strides by shard_degree.
// All-gathers and reduce-scatters get separate communicators (two streams on the progress engine), so
// a reduce-scatter never queues behind a prefetched all-gather, as FSDP2 puts them on separate streams.
#pragma once

#include <cstdint>
#include <memory>

#include "collectives/communicator.h"
#include "runtime/window_pool.h"
#include "spec/mesh.h"

namespace fsdp::runtime {

struct ProcessGroups {
  spec::Mesh mesh;            // replicate x shard over the world
  int64_t reshard_group = 0;  // reshard_after_forward = k: groups of k consecutive shard ranks; 0 = none
  std::unique_ptr<Communicator> shard_gather;  // all-gathers over the shard group
  std::unique_ptr<Communicator> shard_reduce;  // reduce-scatters (and norms) over the shard group
  std::unique_ptr<Communicator> replicate;     // HSDP all-reduce; null when replicate_degree == 1
  std::unique_ptr<Communicator> reshard;       // backward all-gathers of reshard_after_forward = k; or null
  // The gradient reduce-scatter's operation: the average over the shard group, or for expert units a
  // sum scaled by 1 / (the dense shard degree) (see create_experts).
  ReduceOp grad_reduce{ReduceKind::kAvg, 1.0};
  // Expert parallelism (sharding/expert_parallel.h): the EP group the tokens' all_to_all_v runs over;
  // null without it.
  std::unique_ptr<Communicator> expert_parallel;
  // Windows for the units' all-gather outputs (over shard_gather) and reduce-scatter inputs (over
  // shard_reduce) when the shard group is on one host; null otherwise or with FSDP_UNIT_WINDOWS=0.
  // Declared after the communicators: destroyed first.
  std::shared_ptr<WindowPool> gather_windows;
  std::shared_ptr<WindowPool> reduce_windows;

  int64_t shard_degree() const { return mesh.shard_degree(); }
  int64_t replicate_degree() const { return mesh.replicate_degree(); }
  int64_t shard_rank() const { return shard_gather->rank(); }
  int64_t replica_index() const { return replicate ? replicate->rank() : 0; }

  // Collective over `world`. Throws InvalidArgument when the mesh is not of the world's size or
  // reshard_group does not divide the shard degree.
  static ProcessGroups create(Communicator& world, const spec::Mesh& mesh, int64_t reshard_group = 0);
  // The groups of the expert units under expert parallelism of degree ep (> 1, dividing the shard
  // degree S): shard_* over the S / ep ranks of the shard group holding the same experts (shard ranks
  // equal mod ep), replicate as create()'s, expert_parallel over the ep consecutive shard ranks, and
  // mesh = replicate x (S / ep). An expert's gradient arrives summed over its EP group's tokens, so
  // the reduce-scatter sums and scales by 1 / S: the data-parallel average a dense gradient gets.
  // Collective over `world`.
  static ProcessGroups create_experts(Communicator& world, const spec::Mesh& mesh, int64_t ep);

 private:
  void make_window_pools();
};

}  // namespace fsdp::runtime
