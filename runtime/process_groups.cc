#include "runtime/process_groups.h"

#include <string>

namespace fsdp::runtime {

ProcessGroups ProcessGroups::create(Communicator& world, int64_t shard_degree, int64_t replicate_degree,
                                    int64_t reshard_group) {
  const int64_t n = world.size();
  if (shard_degree < 1 || replicate_degree < 1 || shard_degree * replicate_degree != n) {
    throw InvalidArgument("process groups: shard degree " + std::to_string(shard_degree) + " x replicate degree " +
                          std::to_string(replicate_degree) + " must equal the world size " + std::to_string(n));
  }
  if (reshard_group < 0 || (reshard_group > 0 && shard_degree % reshard_group != 0)) {
    throw InvalidArgument("process groups: reshard_after_forward group " + std::to_string(reshard_group) +
                          " must divide the shard degree " + std::to_string(shard_degree));
  }
  const int rank = world.rank();
  const int replica = static_cast<int>(rank / shard_degree);
  const int shard_rank = static_cast<int>(rank % shard_degree);
  ProcessGroups g;
  g.shard_degree = shard_degree;
  g.replicate_degree = replicate_degree;
  g.reshard_group = reshard_group;
  g.shard_gather = world.split(replica, shard_rank);
  g.shard_reduce = world.split(replica, shard_rank);
  // Every rank takes part in every split (split is collective); those outside a group pass -1.
  auto replicate = world.split(replicate_degree > 1 ? shard_rank : -1, replica);
  if (replicate_degree > 1) g.replicate = std::move(replicate);
  const bool grouped = reshard_group > 0 && reshard_group < shard_degree;
  auto reshard =
      world.split(grouped ? static_cast<int>(replica * shard_degree + shard_rank / reshard_group) : -1, shard_rank);
  if (grouped) g.reshard = std::move(reshard);
  return g;
}

}  // namespace fsdp::runtime
