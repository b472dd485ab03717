#include "bench/forked_rank.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace fsdp::bench {

void pin_to_core(int rank) {
  const int cores = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(rank % cores, &set);
  ::sched_setaffinity(0, sizeof set, &set);
}

launch::World connect_forked_rank(int rank, int world_size, const launch::StoreServer& store,
                                  const std::string& transport) {
  launch::BootstrapOverrides o;
  o.rank = rank;
  o.world_size = world_size;
  o.local_rank = rank;
  o.local_world_size = world_size;
  o.master_addr = store.host();
  o.master_port = store.port();
  launch::WorldOptions wo;
  wo.external_store = true;
  wo.transport = transport;
  return launch::connect_world(launch::detect_process_env(o), wo);
}

}  // namespace fsdp::bench
