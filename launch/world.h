// From "who am I" (ProcessEnv, bootstrap.h) to a connected job: rendezvous through the store, host
// discovery, transport choice and the communicator over every rank.
//
//   fsdp::launch::World world = fsdp::launch::connect_world(fsdp::launch::detect_process_env());
//   world.comm->all_reduce(grad, grad, n, fsdp::DataType::kFloat32, fsdp::ReduceOp::sum()).wait();
//
// Start-up, per rank (docs/launch.md has the whole story and every variable):
//   1. the store: rank 0 serves it on MASTER_ADDR:MASTER_PORT unless it is external
//      (FSDP_STORE_EXTERNAL=1, e.g. fsdp-run's or fsdp-store's); under mpirun on one host with no
//      MASTER_* it is found through a file named after the MPI job; a 1-rank job with no master needs none;
//   2. every rank publishes its host identity; rank 0 publishes a random job id;
//   3. rank 0 picks the transport (auto: shm when every rank is on one host, else shm+tcp; or what
//      FSDP_TRANSPORT / WorldOptions::transport names: shm, tcp, ucx, mpi, shm+tcp, shm+ucx) and
//      publishes it, or its refusal, which it keeps serving until every rank has read;
//   4. the transport connects (tcp: listeners bound first, addresses exchanged, then connect; ucx:
//      worker addresses exchanged through the store; mpi: MPI itself, the job must run under mpirun);
//   5. the communicator is created over every rank.
// Every wait of steps 1-4 shares one deadline, WorldOptions::rendezvous_timeout from the start.
// Shutdown (~World) never hangs: a final barrier, then a store-based count so no rank tears its
// transport down before all passed the barrier and rank 0's store outlives everyone's last use of it.
// After any collective error (on the world's communicator or one split from it) it aborts at once
// instead: it never waits on a failed peer again.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/core/options.h"
#include "collectives/transports/transport.h"
#include "common/job_secret.h"
#include "launch/bootstrap.h"
#include "launch/heartbeat.h"
#include "launch/key_value_store.h"
#include "launch/store.h"

namespace fsdp::launch {

// How the ranks sit on hosts, measured at rendezvous (not taken from the launcher's LOCAL_* variables).
struct Topology {
  int host_index = 0, host_count = 1, local_rank = 0, local_size = 1;
  std::vector<int> host_of_rank;  // size world_size; hosts numbered by their lowest rank
};

// FSDP_RENDEZVOUS_TIMEOUT_SEC (seconds, fractions allowed), else 120 s.
std::chrono::milliseconds rendezvous_timeout_from_env();
// FSDP_STORE_EXTERNAL=1 (or true/yes/on): rank 0 connects to the store rather than serving it.
bool store_external_from_env();
// FSDP_HEARTBEAT_TIMEOUT_SEC (seconds, fractions allowed; 0: off), else 20 s.
std::chrono::milliseconds heartbeat_timeout_from_env();
// "fsdp/<FSDP_RUN_ID>/", or "fsdp/<FSDP_RUN_ID>.<sub_job>/": the namespace of a job's store keys, so
// jobs (and the several jobs of one process) sharing an external store never read each other's keys.
// Start k > 0 of a restarted job (FSDP_RESTART_COUNT=k) adds attempt_key_prefix(k).
std::string job_key_prefix(const std::string& sub_job = "");
// "attempt<k>/" for start k > 0 of a job under fsdp-run --max-restarts, "" for the first: the keys of
// each start (the ranks' and the launchers') go under their own.
std::string attempt_key_prefix(int64_t attempt);
// job_key_prefix() of start `attempt` as its ranks will see it: what fsdp-run reads of its ranks' keys.
std::string job_key_prefix_of_attempt(int64_t attempt);

struct WorldOptions {
  // auto|shm|tcp|ucx|mpi|shm+tcp|shm+ucx; FSDP_TRANSPORT env wins over the default but not over an
  // explicit non-auto value
  std::string transport = "auto";
  CommOptions comm = CommOptions::from_env();
  std::chrono::milliseconds rendezvous_timeout = rendezvous_timeout_from_env();  // FSDP_RENDEZVOUS_TIMEOUT_SEC
  // The store runs elsewhere (fsdp-store, fsdp-run): rank 0 does not serve it. FSDP_STORE_EXTERNAL.
  bool external_store = store_external_from_env();
  // Namespace of this job's store keys; empty: job_key_prefix(), "fsdp/<FSDP_RUN_ID>/". Lets one store
  // serve several jobs at once (the NCCL API's rendezvous listener names each communicator's keys by its
  // unique id; fsdp-bench gives each job it joins job_key_prefix(its name)).
  std::string key_prefix;
  // A store the caller already holds (the PyTorch backend's, adapted from torch's c10d::Store): used
  // instead of finding or serving one (step 1). MASTER_ADDR/MASTER_PORT, when set, still tell which
  // local address faces the other hosts.
  std::shared_ptr<KeyValueStore> store;
  // A rank silent this long in the store's heartbeat counts as frozen and fails whatever waits on it
  // (launch/heartbeat.h); zero: no heartbeat, nor with a caller's `store`. FSDP_HEARTBEAT_TIMEOUT_SEC.
  std::chrono::milliseconds heartbeat_timeout = heartbeat_timeout_from_env();
  // The job secret the store connections and TCP handshakes prove (common/job_secret.h). Empty: none
  // configured; a file rendezvous (mpirun on one host) then makes one, others run unauthenticated
  // with a note from rank 0. FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE.
  JobSecret secret = job_secret_from_env();
  // Asked every ~20 ms while the start-up waits for other ranks' keys: a non-empty answer (why) ends
  // connect_world at once with PeerLostError (ElasticWorld: a rank of the epoch it connects exited).
  std::function<std::string()> abandon;
};

struct World {
  ProcessEnv env;
  Topology topology;
  std::string transport_name;
  std::unique_ptr<StoreServer> store_server;  // rank 0 only, when it serves the rendezvous
  std::shared_ptr<KeyValueStore> store;      // null for a 1-rank job with no master named
  std::shared_ptr<Transport> transport;
  std::unique_ptr<Communicator> comm;  // over every rank of the job
  std::unique_ptr<Heartbeat> heartbeat;  // with a store, more than one rank and a heartbeat timeout

  std::string job_id;           // random, chosen by rank 0; names the shm segment
  std::string key_prefix;       // "fsdp/<FSDP_RUN_ID>/": every store key of this job starts with it
  std::string rendezvous_file;  // rank 0 under mpirun without MASTER_*: the file that names the store
  JobSecret secret;             // what this job's connections prove; empty: unauthenticated
  std::chrono::milliseconds rendezvous_timeout{0};

  World() = default;
  World(World&&) noexcept = default;
  World& operator=(World&& other) noexcept;
  ~World() { shutdown(); }

  // Idempotent; the destructor calls it. Healthy communicator: a barrier, then every rank waits until
  // all passed it, then tears down (rank 0 last, so its store server outlives every client's last
  // call). After a collective error on any communicator over this transport (Transport::failure):
  // aborts and tears down at once, so a frozen peer costs no second timeout.
  void shutdown() noexcept;
};

// Throws InvalidArgument for a bad configuration (unknown transport, shm across hosts naming them,
// no rendezvous address), TimeoutError naming this rank, the key and the rank it waited for and the
// timeout, CommError when the transport cannot connect.
World connect_world(const ProcessEnv& env, const WorldOptions& options = {});

// --- Pieces of connect_world, public for tests ---------------------------------------------------

// Groups ranks by identical host identity; hosts are numbered by their lowest rank.
Topology make_topology(const std::vector<std::string>& host_ids, int rank);

// "auto", "shm", "tcp", "ucx", "mpi", "shm+tcp" or "shm+ucx" after FSDP_TRANSPORT: the explicit option wins when it is
// not "auto", then the variable, then auto. Throws InvalidArgument for anything else, and for ucx or mpi in a build
// without them (FSDP_WITH_UCX / FSDP_WITH_MPI off).
std::string resolve_transport_request(const std::string& option);

// The transport for a job laid out as `topology` when `requested` (a resolved request) was asked for:
// auto -> shm on one host, shm+tcp across hosts; tcp, ucx and mpi work for any layout. Throws
// InvalidArgument for shm across hosts, naming each host (`host_names[h]` describes host h) and its ranks.
std::string choose_transport(const std::string& requested, const Topology& topology,
                             const std::vector<std::string>& host_names);

}  // namespace fsdp::launch
