// Communicator life cycle: ncclGetUniqueId, the ncclCommInit* calls, split, finalize, destroy, abort,
// and the queries on a communicator.
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/core/progress_engine.h"
#include "collectives/transports/inproc.h"
#include "nccl/comm.h"
#include "nccl/group.h"
#include "nccl/unique_id.h"

namespace fsdp::nccl {
namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

// ncclCommInitAll's ranks are threads of this process on one progress thread, each holding state per
// peer (n^2 in all: 1024 ranks take 36 MiB and 0.06 s, 4096 take 410 MiB and 0.6 s, 16384 8 s).
// NCCL makes one rank per device of the host, and no host has a thousand; a larger job is processes
// (ncclCommInitRank).
constexpr int kMaxInitAllRanks = 1024;

struct Config {
  std::string name;
};

// Accepts NULL (defaults) or a struct filled from NCCL_CONFIG_INITIALIZER of this or an older header.
Config read_config(const ncclConfig_t* config) {
  Config c;
  if (!config) return c;
  if (config->magic != kConfigMagic || config->size < offsetof(ncclConfig_t, netName)) {
    throw ApiError(ncclInvalidArgument, "config was not initialized with NCCL_CONFIG_INITIALIZER (magic " +
                                            std::to_string(config->magic) + ", size " + std::to_string(config->size) + ")");
  }
  if (config->size >= offsetof(ncclConfig_t, commName) + sizeof(config->commName) && config->commName) {
    c.name = config->commName;
  }
  return c;
}

ncclComm* make_comm(int rank, int size, std::string name) {
  auto* c = new ncclComm;
  c->rank = rank;
  c->size = size;
  c->name = std::move(name);
  register_handle(c);
  return c;
}

// A split or shrunk communicator's name: the config's, else the parent's.
std::string child_name(const ncclComm* parent, const ncclConfig_t* config) {
  std::string name = read_config(config).name;
  return name.empty() ? parent->name : name;
}

// The handle of a communicator split or shrunk from another, which it owns.
ncclComm* adopt(std::unique_ptr<Communicator> child, const std::string& name) {
  ncclComm* c = make_comm(child->rank(), child->size(), name);
  c->owned = std::move(child);
  c->comm = c->owned.get();
  return c;
}

// Joins the job the id names, as connect_world does for launched jobs (docs/launch.md): store, host
// identities, transport choice (FSDP_TRANSPORT; shm on one host, tcp across), communicator.
ncclComm* join(int nranks, int rank, const UniqueId& id, const Config& config) {
  launch::ProcessEnv env;
  env.rank = rank;
  env.world_size = nranks;
  env.master_addr = id.host;
  env.master_port = id.port;
  env.source = "ncclCommInitRank";
  launch::WorldOptions options;
  options.external_store = id.mode == IdMode::kCallerServes;
  options.key_prefix = "nccl/" + id.job + "/";
  // The id is the capability: its secret authenticates this communicator's store and TCP connections.
  if (!id.secret.empty()) options.secret = JobSecret{id.secret, "the ncclUniqueId"};
  auto world = std::make_shared<launch::World>(launch::connect_world(env, options));
  ncclComm* c = make_comm(rank, nranks, config.name);
  c->comm = world->comm.get();
  debug_info("rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " joined job " + world->job_id +
             " over " + world->transport_name + " (store " + id.host + ":" + std::to_string(id.port) + ", hosts " +
             std::to_string(world->topology.host_count) + ")");
  c->world = std::move(world);
  return c;
}

// The collective half of finalize: a world's orderly shutdown (barrier, then the store count so no rank
// leaves before all are done), by the last communicator holding it (the parent, or a shrunk child). A
// healthy shrunk child of processes first waits at a barrier of its own members, so no survivor leaves
// (its connections closing, as a lost peer's do) while another still runs on the child; after a
// failure its world's shutdown waits on no one. In-process and split communicators need none: their
// transports stay alive as long as any uses them.
ncclResult_t finalize(ncclComm* comm, const char* fn) {
  return guarded(comm, fn, [&] {
    bool healthy = false;
    {
      std::lock_guard<std::mutex> lock(comm->mu);
      if (comm->finalized || comm->aborted) return ncclSuccess;
      comm->finalized = true;
      comm->comm = nullptr;  // no operation may start from now on
      healthy = comm->async_error == ncclSuccess;
    }
    if (healthy && comm->world && comm->owned && comm->owned->size() > 1) {
      try {
        comm->owned->barrier().wait(comm->owned->options().timeout);
      } catch (...) {  // a survivor lost meanwhile: leave anyway, as a broken communicator does
      }
    }
    comm->world.reset();  // the last holder's ~World shuts it down
    return ncclSuccess;
  });
}

// The parent of a shrink: not finalized or aborted, but possibly broken (a shrink is how one recovers).
Communicator& alive(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(comm->mu);
  if (comm->aborted) throw ApiError(ncclInvalidUsage, "the communicator was aborted");
  if (comm->finalized || !comm->comm) {
    throw ApiError(ncclInvalidUsage, "the communicator was finalized; only ncclCommDestroy may follow");
  }
  return *comm->comm;
}

// A lost peer breaks comm with ncclRemoteError naming it, as the failed operation would have, without
// an operation having to wait on it. At most every kProbePeriod: a caller polling in a loop costs the
// transport one look per period (a /proc read per peer on shared memory).
constexpr auto kProbePeriod = std::chrono::milliseconds(10);

void probe_peers(ncclComm* comm) {
  std::optional<Communicator::LostPeer> lost;
  int job_rank = -1;
  {
    // Held through the look: a finalize on another thread (which takes it first) cannot free the
    // communicator under it. The engine's lock is only ever taken after this one.
    std::lock_guard<std::mutex> lock(comm->mu);
    const auto now = std::chrono::steady_clock::now();
    if (comm->async_error != ncclSuccess || comm->finalized || comm->aborted || !comm->comm) return;
    if (now < comm->next_probe) return;
    comm->next_probe = now + kProbePeriod;
    lost = comm->comm->lost_peer();
    if (!lost) return;
    job_rank = comm->comm->global_rank(lost->rank);
  }
  Classified c{ncclRemoteError, true,
               where("ncclCommGetAsyncError", comm) + ": peer " + std::to_string(lost->rank) + " (rank " +
                   std::to_string(job_rank) + " of the job) was lost: " + lost->why};
  mark_broken(comm, c);
  record_error(comm, c.text);
}

}  // namespace
}  // namespace fsdp::nccl

using namespace fsdp::nccl;

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded(nullptr, "ncclGetUniqueId", [&] {
    require(uniqueId != nullptr, "uniqueId is NULL");
    *uniqueId = encode(new_unique_id());
    return ncclSuccess;
  });
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  const char* fn = "ncclCommInitRank";
  const ncclResult_t checked = api_call(nullptr, fn, [&] {
    require(comm != nullptr, "comm is NULL");
    *comm = nullptr;
    require(nranks >= 1, "nranks " + std::to_string(nranks) + " is not positive");
    require(rank >= 0 && rank < nranks, "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(nranks) + ")");
    decode(commId);
    read_config(config);
    return ncclSuccess;
  });
  if (checked != ncclSuccess) return checked;
  return run_or_defer([=] {
    return guarded(nullptr, fn, [&] {
      *comm = join(nranks, rank, decode(commId), read_config(config));
      return ncclSuccess;
    });
  });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config) {
  const ncclResult_t checked = api_call(nullptr, "ncclCommInitRankScalable", [&] {
    require(nId >= 1 && commIds != nullptr, "needs at least one id (nId " + std::to_string(nId) + ")");
    return ncclSuccess;
  });
  if (checked != ncclSuccess) return checked;
  // Every id names the same job; the first one's listener carries the whole rendezvous.
  return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* /*devlist*/) {
  return guarded(nullptr, "ncclCommInitAll", [&] {
    require(comm != nullptr, "comm is NULL");
    require(ndev >= 1, "ndev " + std::to_string(ndev) + " is not positive");
    require(ndev <= kMaxInitAllRanks, "ndev " + std::to_string(ndev) + " is more than the " +
                                          std::to_string(kMaxInitAllRanks) +
                                          " ranks one process runs (docs/nccl_api.md); use ncclCommInitRank in "
                                          "processes for more");
    auto transports = fsdp::make_inproc_transports(ndev);
    // One engine thread drives every rank of the process, as in the in-process tests.
    auto engine = std::make_shared<fsdp::ProgressEngine>();
    const fsdp::CommOptions options = fsdp::CommOptions::from_env();
    std::vector<std::unique_ptr<fsdp::Communicator>> comms;
    for (int r = 0; r < ndev; ++r) comms.push_back(fsdp::Communicator::create(transports[r], options, engine));
    for (int r = 0; r < ndev; ++r) {
      ncclComm* c = make_comm(r, ndev, "");
      c->owned = std::move(comms[r]);
      c->comm = c->owned.get();
      comm[r] = c;
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  std::string name;
  const ncclResult_t checked = api_call(comm, fn, [&] {
    require(newcomm != nullptr, "newcomm is NULL");
    *newcomm = nullptr;
    require(color >= 0 || color == NCCL_SPLIT_NOCOLOR,
         "color " + std::to_string(color) + " is negative but not NCCL_SPLIT_NOCOLOR");
    usable(comm);
    name = child_name(comm, config);
    return ncclSuccess;
  });
  if (checked != ncclSuccess) return checked;
  return run_or_defer([=, held = hold(comm)] {
    return guarded(comm, fn, [&] {
      std::unique_ptr<fsdp::Communicator> child = usable(comm).split(color, key);
      if (child) *newcomm = adopt(std::move(child), name);
      return ncclSuccess;
    });
  });
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags) {
  const char* fn = "ncclCommShrink";
  std::string name;
  std::vector<int> excluded;
  const ncclResult_t checked = api_call(comm, fn, [&] {
    require(comm != nullptr, "comm is NULL");
    require(newcomm != nullptr, "newcomm is NULL");
    *newcomm = nullptr;
    require(
        (shrinkFlags & ~NCCL_SHRINK_ABORT) == 0,
        "shrinkFlags " + std::to_string(shrinkFlags) + " is neither NCCL_SHRINK_DEFAULT (0) nor NCCL_SHRINK_ABORT (1)");
    require(excludeRanksCount >= 0, "excludeRanksCount " + std::to_string(excludeRanksCount) + " is negative");
    require(excludeRanksCount == 0 || excludeRanksList != nullptr,
            "excludeRanksList is NULL with excludeRanksCount " + std::to_string(excludeRanksCount));
    if (excludeRanksCount > 0) excluded.assign(excludeRanksList, excludeRanksList + excludeRanksCount);
    fsdp::shrink_survivors(comm->size, comm->rank, excluded);
    alive(comm);
    name = child_name(comm, config);
    return ncclSuccess;
  });
  if (checked != ncclSuccess) return checked;
  return run_or_defer([=, held = hold(comm)] {
    return guarded(comm, fn, [&] {
      fsdp::Communicator& parent = alive(comm);
      if (shrinkFlags & NCCL_SHRINK_ABORT) {
        // What the parent still has in flight fails now (a call blocked on another thread returns), and
        // the parent stays broken; the user still aborts or destroys it, as with NCCL.
        const std::string why = where(fn, comm) + ": the parent was aborted by NCCL_SHRINK_ABORT";
        parent.abort(why);
        mark_broken(comm, Classified{ncclInvalidUsage, true, why});
      }
      ncclComm* c = adopt(parent.shrink(excluded), name);
      std::lock_guard<std::mutex> lock(comm->mu);
      c->world = comm->world;
      *newcomm = c;
      return ncclSuccess;
    });
  });
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int) {
  return api_call(comm, "ncclCommRevoke", [&]() -> ncclResult_t {
    throw ApiError(ncclInvalidUsage, "ncclCommRevoke is not supported (docs/nccl_api.md); use ncclCommAbort");
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  const char* fn = "ncclCommFinalize";
  const ncclResult_t checked = api_call(comm, fn, [&] {
    require(comm != nullptr, "comm is NULL");
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->aborted) throw ApiError(ncclInvalidUsage, "the communicator was aborted");
    if (comm->finalized) throw ApiError(ncclInvalidUsage, "the communicator was already finalized");
    return ncclSuccess;
  });
  if (checked != ncclSuccess) return checked;
  return run_or_defer([=, held = hold(comm)] {
    const ncclResult_t r = finalize(comm, fn);
    std::lock_guard<std::mutex> lock(comm->mu);
    return r != ncclSuccess ? r : comm->async_error;  // a broken communicator says so
  });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL: destroying nothing is fine
  return with_handle(comm, "ncclCommDestroy", [&] {
    return run_or_defer([=, held = hold(comm)] {
      // Only the first of destroy/abort drops the handle's reference (a destroy queued in a group may
      // meet an abort that came first).
      if (!release_handle(comm)) return ncclSuccess;
      const ncclResult_t r = finalize(comm, "ncclCommDestroy");
      unpin(comm);  // the handle's reference; `held` frees it (unless a call in progress still holds one)
      return r;
    });
  });
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  return with_handle(comm, "ncclCommAbort", [&] {
    forget(comm);
    fsdp::Communicator* running = nullptr;
    {
      std::lock_guard<std::mutex> lock(comm->mu);
      comm->aborted = true;
      running = comm->comm;
      comm->comm = nullptr;
    }
    // Fails what is in flight (a call blocked on another thread returns with an error) and breaks the
    // communicator, so the World's shutdown at the last reference tears down without waiting on peers.
    if (running) running->abort("ncclCommAbort");
    if (release_handle(comm)) unpin(comm);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return with_handle(comm, "ncclCommGetAsyncError", [&] {
    require(comm != nullptr, "comm is NULL");
    require(asyncError != nullptr, "asyncError is NULL");
    probe_peers(comm);
    std::lock_guard<std::mutex> lock(comm->mu);
    *asyncError = comm->async_error;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return with_handle(comm, "ncclCommCount", [&] {
    require(comm != nullptr, "comm is NULL");
    require(count != nullptr, "count is NULL");
    *count = comm->size;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return with_handle(comm, "ncclCommUserRank", [&] {
    require(comm != nullptr, "comm is NULL");
    require(rank != nullptr, "rank is NULL");
    *rank = comm->rank;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return with_handle(comm, "ncclCommCuDevice", [&] {
    require(comm != nullptr, "comm is NULL");
    require(device != nullptr, "device is NULL");
    *device = -1;
    return ncclSuccess;
  });
}

}  // extern "C"
