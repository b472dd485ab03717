// connect_world's rendezvous (world.h, step 1) and the store calls of its later steps, with errors
// that say who waited for whom. Only world.cc includes this.
//
// Keys: every rank's under prefix + what + "/<rank>" (rank_key), rank 0's alone under prefix + name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/world.h"

namespace fsdp::launch {

// Step 1 without a caller's store: under torchrun's agent store, a client of it (torchrun_store.h);
// under mpirun/srun on one host with no MASTER_* the rendezvous file
// (rank 0 serves on the loopback, makes a job secret when none is set and names both in a 0600 file
// the others read); else rank 0 serves on MASTER_ADDR:MASTER_PORT unless the store is external; then
// this rank's client in w.store. store_host/store_port end as the address the client used. Throws
// InvalidArgument when no store is named, TimeoutError when it cannot be reached in time.
void find_or_serve_store(World& w, const ProcessEnv& env, const WorldOptions& options, std::string& store_host,
                         uint16_t& store_port);

std::string rank_key(const std::string& prefix, const char* what, int r);

// What every rank published under rank_key(prefix, what, r), in rank order; waits up to the world's
// rendezvous timeout, then throws TimeoutError naming the ranks that never published.
std::vector<std::string> gather_all(KeyValueStore& store, const std::string& prefix, const char* what, const World& w);

// A key only rank 0 sets; TimeoutError naming it and rank 0 after the rendezvous timeout.
std::string get_from_rank0(KeyValueStore& store, const std::string& key, const World& w);

}  // namespace fsdp::launch
