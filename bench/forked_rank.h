// What the benchmarks' forked ranks (launch::fork_ranks) share: a core of their own and a world over
// the parent's store, one process per rank on this host.
#pragma once

#include <string>

#include "launch/store.h"
#include "launch/world.h"

namespace fsdp::bench {

// Pins the calling process to core rank % (cores online).
void pin_to_core(int rank);
// Rank `rank` of `world_size` joins the others through `store` (served by the parent) over `transport`.
launch::World connect_forked_rank(int rank, int world_size, const launch::StoreServer& store,
                                  const std::string& transport);

}  // namespace fsdp::bench
