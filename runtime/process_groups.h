// The communicators one rank's FSDP state uses, split once from the world communicator.
//
// Ranks follow sharding::Mesh: rank = replica * shard_degree + shard_rank, so a shard group is a run
// of consecutive ranks (one server when it fits) and a replicate group strides by shard_degree.
// All-gathers and reduce-scatters get separate communicators (two streams on the progress engine), so
// a reduce-scatter never queues behind a prefetched all-gather, as FSDP2 puts them on separate streams.
#pragma once

#include <cstdint>
#include <memory>

#include "collectives/communicator.h"
#include "sharding/mesh.h"

namespace fsdp::runtime {

struct ProcessGroups {
  sharding::Mesh mesh;        // replicate x shard over the world
  int64_t reshard_group = 0;  // reshard_after_forward = k: groups of k consecutive shard ranks; 0 = none
  std::unique_ptr<Communicator> shard_gather;  // all-gathers over the shard group
  std::unique_ptr<Communicator> shard_reduce;  // reduce-scatters (and norms) over the shard group
  std::unique_ptr<Communicator> replicate;     // HSDP all-reduce; null when replicate_degree == 1
  std::unique_ptr<Communicator> reshard;       // backward all-gathers of reshard_after_forward = k; or null

  int64_t shard_degree() const { return mesh.shard_degree(); }
  int64_t replicate_degree() const { return mesh.replicate_degree(); }
  int64_t shard_rank() const { return shard_gather->rank(); }
  int64_t replica_index() const { return replicate ? replicate->rank() : 0; }

  // Collective over `world`. Throws InvalidArgument when the mesh is not of the world's size or
  // reshard_group does not divide the shard degree.
  static ProcessGroups create(Communicator& world, const sharding::Mesh& mesh, int64_t reshard_group = 0);
};

}  // namespace fsdp::runtime
