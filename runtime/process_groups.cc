#include "runtime/process_groups.h"

#include <string>

#include "spec/job_spec.h"

namespace fsdp::runtime {

ProcessGroups ProcessGroups::create(Communicator& world, const spec::Mesh& mesh, int64_t reshard_group) {
  const int64_t shard_degree = mesh.shard_degree();
  spec::check_mesh_fills_world(mesh.replicate_degree(), shard_degree, world.size());
  if (reshard_group != 0) spec::check_reshard_group({spec::Reshard::Mode::kGroup, reshard_group}, shard_degree);
  const int rank = world.rank();
  const int replica = static_cast<int>(mesh.replica_index(rank));
  const int shard_rank = static_cast<int>(mesh.shard_rank(rank));
  ProcessGroups g;
  g.mesh = mesh;
  g.reshard_group = reshard_group;
  g.shard_gather = world.split(replica, shard_rank);
  g.shard_reduce = world.split(replica, shard_rank);
  // Every rank takes part in every split (split is collective); those outside a group pass -1.
  auto replicate = world.split(mesh.replicate_degree() > 1 ? shard_rank : -1, replica);
  if (mesh.replicate_degree() > 1) g.replicate = std::move(replicate);
  const bool grouped = reshard_group > 0 && reshard_group < shard_degree;
  auto reshard =
      world.split(grouped ? static_cast<int>(replica * shard_degree + shard_rank / reshard_group) : -1, shard_rank);
  if (grouped) g.reshard = std::move(reshard);
  g.make_window_pools();
  return g;
}

ProcessGroups ProcessGroups::create_experts(Communicator& world, const spec::Mesh& mesh, int64_t ep) {
  const int64_t shard_degree = mesh.shard_degree();
  spec::check_expert_parallel_degree(ep, shard_degree);
  if (ep < 2) throw InvalidArgument("process groups: expert groups need an expert_parallel_degree of 2 or more");
  const int rank = world.rank();
  const auto replica = static_cast<int>(mesh.replica_index(rank));
  const auto shard_rank = static_cast<int>(mesh.shard_rank(rank));
  const int e = static_cast<int>(ep);
  const int expert_shards = static_cast<int>(shard_degree / ep);
  ProcessGroups g;
  g.mesh = spec::Mesh::for_world(mesh.replicate_degree() * expert_shards, mesh.replicate_degree());
  // Same experts: shard ranks equal mod ep, ordered by shard_rank / ep.
  g.shard_gather = world.split(replica * e + shard_rank % e, shard_rank / e);
  g.shard_reduce = world.split(replica * e + shard_rank % e, shard_rank / e);
  auto replicate = world.split(mesh.replicate_degree() > 1 ? shard_rank : -1, replica);
  if (mesh.replicate_degree() > 1) g.replicate = std::move(replicate);
  g.expert_parallel = world.split(replica * expert_shards + shard_rank / e, shard_rank % e);
  g.grad_reduce = ReduceOp::premul_sum(1.0 / static_cast<double>(shard_degree));
  g.make_window_pools();
  return g;
}

void ProcessGroups::make_window_pools() {
  gather_windows = WindowPool::create_for(*shard_gather);
  reduce_windows = WindowPool::create_for(*shard_reduce);
}

}  // namespace fsdp::runtime
