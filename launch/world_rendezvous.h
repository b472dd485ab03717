// connect_world's rendezvous (world.h, step 1) and the store calls of its later steps, with errors
// that say who waited for whom. Only world.cc (and world_test.cc) include this.
//
// Keys: every rank's under prefix + what + "/<rank>" (rank_key), rank 0's alone under prefix + name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/startup_deadline.h"
#include "launch/world.h"

namespace fsdp::launch {

// Step 1 without a caller's store: under torchrun's agent store, a client of it (torchrun_store.h);
// under mpirun/srun on one host with no MASTER_* the rendezvous file
// (rank 0 serves on the loopback, makes a job secret when none is set and names both in a 0600 file
// the others read); else rank 0 serves on MASTER_ADDR:MASTER_PORT unless the store is external; then
// this rank's client in w.store. store_host/store_port end as the address the client used. Throws
// InvalidArgument when no store is named, TimeoutError when it cannot be reached before `deadline`;
// the client's reconnects stop at the deadline too until connect_world lifts it.
void find_or_serve_store(World& w, const ProcessEnv& env, const WorldOptions& options, const StartupDeadline& deadline,
                         std::string& store_host, uint16_t& store_port);

std::string rank_key(const std::string& prefix, const char* what, int r);

// What every rank published under rank_key(prefix, what, r), in rank order, waiting at most what is
// left of `deadline` in all. After it, TimeoutError from `rank` naming the ranks whose keys are still
// missing (one look each, no waiting), or the store itself when it no longer answers. Rank 0's error
// is a verdict: it fills the missing keys with it, which ends the others' wait in the same gather
// (they fail with "rank 0 gave up: <its words>" and acknowledge under prefix + what + "/read/<r>"),
// and keeps the store up until each that arrived has (at most 5 s, or the timeout if shorter).
std::vector<std::string> gather_all(KeyValueStore& store, const std::string& prefix, const char* what, int rank,
                                    int world_size, const StartupDeadline& deadline);

// A key only rank 0 sets, read by `rank` within what is left of `deadline`; TimeoutError naming the
// key and rank 0 after it. A verdict (publish_verdict) is acknowledged and thrown as InvalidArgument
// in rank 0's words.
std::string get_from_rank0(KeyValueStore& store, const std::string& key, int rank, const StartupDeadline& deadline);

// Rank 0's refusal of the job (`why`, an exception's text) under `key`, where the others read rank
// 0's decision; then it keeps the store up until all `world_size - 1` others acknowledged reading it,
// or the deadline passed, so none of them finds the store gone instead (rank 0 usually serves it).
void publish_verdict(KeyValueStore& store, const std::string& key, const std::string& why, int world_size,
                     const StartupDeadline& deadline);

// The keys the others set when they read a verdict under `key` (rank r's: key + "/read/<r>").
std::vector<std::string> verdict_keys(const std::string& key, int world_size);

}  // namespace fsdp::launch
