#include "launch/world.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "collectives/transports/hybrid.h"
#include "collectives/transports/shm.h"
#include "collectives/transports/tcp.h"
#include "collectives/types/errors.h"
#include "common/knobs.h"
#include "launch/host_address.h"
#include "launch/job_id.h"
#include "launch/world_rendezvous.h"
#ifdef FSDP_HAVE_UCX
#include "collectives/transports/ucx.h"
#endif
#ifdef FSDP_HAVE_MPI
#include "collectives/transports/mpi.h"
#endif

namespace fsdp::launch {
namespace {

using std::chrono::milliseconds;

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// What a rank publishes about its host: the identity compared between ranks, and the hostname and
// address shown in messages. Encoded as three tab-separated fields.
struct HostInfo {
  std::string id, hostname, address;

  std::string encode() const { return id + '\t' + hostname + '\t' + address; }
  static HostInfo decode(const std::string& text) {
    HostInfo h;
    std::istringstream in(text);
    std::getline(in, h.id, '\t');
    std::getline(in, h.hostname, '\t');
    std::getline(in, h.address, '\t');
    return h;
  }
  std::string describe() const { return address.empty() ? hostname : hostname + " (" + address + ")"; }
};

HostInfo local_host_info(const std::string& store_host, uint16_t store_port) {
  HostInfo h;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  h.hostname = name;
  h.address = store_host.empty() ? "" : source_address_towards(store_host, store_port);
  if (h.address.empty()) h.address = is_loopback(store_host) ? store_host : "127.0.0.1";
  const std::string override_id = knobs::kHostId.get();
  h.id = !override_id.empty() ? override_id
                              : h.hostname + "/" + read_first_line("/proc/sys/kernel/random/boot_id") + "/" + h.address;
  return h;
}

// Rank 0's one line when nothing authenticates the job although something of it is reachable: a
// store beyond the loopback, or TCP or UCX connections.
void note_if_unauthenticated(const World& w, const std::string& store_host) {
  if (w.env.rank != 0 || !w.secret.empty() || w.env.world_size == 1) return;
  // TCP and UCX connections: anyone who reaches their addresses may try.
  const bool network =
      w.transport_name.find("tcp") != std::string::npos || w.transport_name.find("ucx") != std::string::npos;
  const bool exposed_store = w.store_server && !is_loopback(store_host);
  if (!network && !exposed_store) return;
  std::fprintf(stderr,
               "fsdp: note: no job secret (FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE; fsdp-run sets one): the %s not "
               "authenticated, so any process that reaches %s can join or disturb this job\n",
               network && exposed_store ? "store and transport handshakes are"
               : network                ? "transport handshakes are"
                                        : "store is",
               network ? "its ports" : "the store");
}

// Step 2: rank 0 draws the job id; every rank publishes its host and learns everyone's, in rank order.
std::vector<HostInfo> meet_hosts(World& w, const HostInfo& me, const StartupDeadline& deadline) {
  std::vector<HostInfo> hosts;
  if (!w.store) {
    w.job_id = random_job_id();
    hosts.push_back(me);
    return hosts;
  }
  const int rank = w.env.rank;
  if (rank == 0) {
    w.job_id = random_job_id();
    w.store->set(w.key_prefix + "job_id", w.job_id);
  }
  w.store->set(rank_key(w.key_prefix, "host", rank), me.encode());
  for (const std::string& text : gather_all(*w.store, w.key_prefix, "host", rank, w.env.world_size, deadline)) {
    hosts.push_back(HostInfo::decode(text));
  }
  if (rank != 0) w.job_id = get_from_rank0(*w.store, w.key_prefix + "job_id", rank, deadline);
  return hosts;
}

// Step 3: the transport, decided by rank 0 so that every rank agrees even if their environments
// differ; a refusal reaches the other ranks in rank 0's words, rank 0 staying until all have read it.
void agree_transport(World& w, const std::string& requested, const std::vector<HostInfo>& hosts,
                     const StartupDeadline& deadline) {
  if (!w.store) {
    w.transport_name = choose_transport(requested, w.topology, {hosts[0].describe()});
    return;
  }
  const int rank = w.env.rank, n = w.env.world_size;
  const std::string key = w.key_prefix + "transport";
  if (rank == 0) {
    std::vector<std::string> names(w.topology.host_count);
    for (int r = n - 1; r >= 0; --r) names[w.topology.host_of_rank[r]] = hosts[r].describe();
    try {
      w.transport_name = choose_transport(requested, w.topology, names);
    } catch (const InvalidArgument& e) {
      publish_verdict(*w.store, key, e.what(), n, deadline);  // the others fail with the same words
      throw;
    }
    w.store->set(key, w.transport_name);
    return;
  }
  const std::string chosen = get_from_rank0(*w.store, key, rank, deadline);
  if (requested != "auto" && requested != chosen) {
    throw InvalidArgument("rank " + std::to_string(rank) + " asked for transport " + requested + " but rank 0 chose " +
                          chosen + ": set the same FSDP_TRANSPORT on every rank");
  }
  w.transport_name = chosen;
}

// Step 4's network half: ucx, mpi or tcp over every rank, addresses traded through the store.
// `me.address` is where this rank reaches the store from: the one its peers can reach it at.
std::shared_ptr<Transport> network_transport(World& w, const std::string& name, const StartupDeadline& deadline,
                                             const HostInfo& me) {
  const int rank = w.env.rank, n = w.env.world_size;
#ifdef FSDP_HAVE_UCX
  if (name == "ucx") {
    // Worker addresses through the store: publish ucx/<rank>, gather everyone's.
    auto exchange = [&](const std::string& mine) {
      if (!w.store) return std::vector<std::string>{mine};
      w.store->set(rank_key(w.key_prefix, "ucx", rank), mine);
      return gather_all(*w.store, w.key_prefix, "ucx", rank, n, deadline);
    };
    UcxOptions ucx;
    ucx.secret = w.secret.key;
    return make_ucx_transport(rank, n, exchange, deadline.remaining(), ucx);
  }
#endif
#ifdef FSDP_HAVE_MPI
  if (name == "mpi") return make_mpi_transport(rank, n, deadline.remaining());  // MPI knows where everyone is
#endif
  (void)name;
  TcpListener listener = TcpListener::bind(me.address);
  std::vector<TcpEndpoint> peers(n);
  if (w.store) {
    w.store->set(rank_key(w.key_prefix, "tcp", rank), listener.address());
    const auto addresses = gather_all(*w.store, w.key_prefix, "tcp", rank, n, deadline);
    for (int r = 0; r < n; ++r) peers[r] = TcpEndpoint::parse(addresses[r]);
  } else {
    peers[0] = listener.endpoint();
  }
  TcpOptions tcp = TcpOptions::from_env();
  tcp.secret = w.secret.key;
  return make_tcp_transport(rank, n, std::move(listener), peers, deadline.remaining(), tcp);
}

// The job ranks on this host, in order: the shared-memory segment's ranks, for its error messages.
std::vector<int> host_ranks(const Topology& t) {
  std::vector<int> ranks;
  for (size_t r = 0; r < t.host_of_rank.size(); ++r) {
    if (t.host_of_rank[r] == t.host_index) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

// Step 4: one transport, or shared memory within each host plus the network between them.
std::shared_ptr<Transport> build_transport(World& w, const StartupDeadline& deadline, const HostInfo& me) {
  const int rank = w.env.rank, n = w.env.world_size;
  if (w.transport_name == "shm") return make_shm_transport(w.job_id, rank, n, deadline.remaining());
  if (w.transport_name.rfind("shm+", 0) == 0) {
    // One segment per host, named after the job and the host, over the host's ranks alone.
    const Topology& t = w.topology;
    auto local = make_shm_transport(w.job_id + "-h" + std::to_string(t.host_index), t.local_rank, t.local_size,
                                    deadline.remaining(), host_ranks(t));
    return make_hybrid_transport(rank, t.host_of_rank, std::move(local),
                                 network_transport(w, w.transport_name.substr(4), deadline, me));
  }
  return network_transport(w, w.transport_name, deadline, me);
}

}  // namespace

// --- Options -------------------------------------------------------------------------------------

milliseconds rendezvous_timeout_from_env() {
  return milliseconds(static_cast<long long>(knobs::kRendezvousTimeoutSec.get() * 1000.0));
}

bool store_external_from_env() { return knobs::kStoreExternal.get(); }

std::string attempt_key_prefix(int64_t attempt) { return attempt > 0 ? "attempt" + std::to_string(attempt) + "/" : ""; }

std::string job_key_prefix(const std::string& sub_job) {
  // A restarted job (fsdp-run --max-restarts) must not read the keys its failed start left in the store.
  if (sub_job.empty()) return job_key_prefix_of_attempt(knobs::kRestartCount.get());
  return "fsdp/" + knobs::kRunId.get() + "." + sub_job + "/" + attempt_key_prefix(knobs::kRestartCount.get());
}

std::string job_key_prefix_of_attempt(int64_t attempt) {
  return "fsdp/" + knobs::kRunId.get() + "/" + attempt_key_prefix(attempt);
}

milliseconds heartbeat_timeout_from_env() {
  return milliseconds(static_cast<long long>(std::min(knobs::kHeartbeatTimeoutSec.get(), 1e9) * 1000.0));
}

std::string resolve_transport_request(const std::string& option) {
  std::string t = option.empty() ? "auto" : option;
  std::string source = "WorldOptions::transport";
  if (t == "auto") {
    const std::string from_env = knobs::kTransport.get();
    if (knobs::kTransport.is_set()) {
      t = from_env;
      source = "FSDP_TRANSPORT";
    }
  }
  if (t == "auto" || t == "shm" || t == "tcp" || t == "shm+tcp") return t;
#ifdef FSDP_HAVE_UCX
  if (t == "ucx" || t == "shm+ucx") return t;
#else
  if (t == "ucx" || t == "shm+ucx") {
    throw InvalidArgument(source + "='" + t + "': this build has no UCX transport (configured with FSDP_WITH_UCX=OFF)");
  }
#endif
#ifdef FSDP_HAVE_MPI
  if (t == "mpi") return t;
#else
  if (t == "mpi") throw InvalidArgument(source + "='mpi': this build has no MPI transport (configured with FSDP_WITH_MPI=OFF)");
#endif
  throw InvalidArgument(source + "='" + t + "' is not a transport (auto, shm, tcp, ucx, mpi, shm+tcp or shm+ucx)");
}

// --- Topology ------------------------------------------------------------------------------------

Topology make_topology(const std::vector<std::string>& host_ids, int rank) {
  const int n = static_cast<int>(host_ids.size());
  if (rank < 0 || rank >= n) {
    throw InvalidArgument("make_topology: rank " + std::to_string(rank) + " outside [0, " + std::to_string(n) + ")");
  }
  Topology t;
  std::map<std::string, int> index;
  t.host_of_rank.resize(n);
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = index.try_emplace(host_ids[r], static_cast<int>(index.size()));
    t.host_of_rank[r] = it->second;
  }
  t.host_count = static_cast<int>(index.size());
  t.host_index = t.host_of_rank[rank];
  t.local_rank = 0;
  t.local_size = 0;
  for (int r = 0; r < n; ++r) {
    if (t.host_of_rank[r] != t.host_index) continue;
    if (r < rank) ++t.local_rank;
    ++t.local_size;
  }
  return t;
}

std::string choose_transport(const std::string& requested, const Topology& topology,
                             const std::vector<std::string>& host_names) {
  if (requested == "tcp" || requested == "ucx" || requested == "mpi") return requested;  // any layout
  // Shared memory inside each host, the network between hosts; on one host that is plain shm.
  if (requested == "auto" || requested == "shm+tcp") return topology.host_count == 1 ? "shm" : "shm+tcp";
  if (requested == "shm+ucx") return topology.host_count == 1 ? "shm" : "shm+ucx";
  if (requested != "shm") throw InvalidArgument("choose_transport: unknown request '" + requested + "'");
  if (topology.host_count == 1) return "shm";
  std::string hosts;
  for (int h = 0; h < topology.host_count; ++h) {
    std::string ranks;
    for (size_t r = 0; r < topology.host_of_rank.size(); ++r) {
      if (topology.host_of_rank[r] == h) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    }
    const std::string name = h < static_cast<int>(host_names.size()) ? host_names[h] : "host " + std::to_string(h);
    hosts += (hosts.empty() ? "" : "; ") + name + ": ranks " + ranks;
  }
  throw InvalidArgument("transport shm was asked for but the ranks span " + std::to_string(topology.host_count) +
                        " hosts (" + hosts +
                        "); shared memory works within one host: use FSDP_TRANSPORT=tcp or auto (or set FSDP_HOST_ID "
                        "if these really are one host)");
}

// --- World ---------------------------------------------------------------------------------------

World& World::operator=(World&& o) noexcept {
  if (this == &o) return *this;
  shutdown();
  env = std::move(o.env);
  topology = std::move(o.topology);
  transport_name = std::move(o.transport_name);
  store_server = std::move(o.store_server);
  store = std::move(o.store);
  transport = std::move(o.transport);
  comm = std::move(o.comm);
  heartbeat = std::move(o.heartbeat);
  job_id = std::move(o.job_id);
  key_prefix = std::move(o.key_prefix);
  rendezvous_file = std::move(o.rendezvous_file);
  secret = std::move(o.secret);
  rendezvous_timeout = o.rendezvous_timeout;
  return *this;
}

void World::shutdown() noexcept {
  const int n = env.world_size;
  if (comm && store && n > 1) {
    // After a collective error on any communicator of this job (the world's or one split from it),
    // the failed peer may be frozen: a barrier would wait on it for a whole timeout again. Abort.
    const std::string failure = transport ? transport->failure() : std::string();
    bool healthy = false;
    if (failure.empty()) {
      try {
        comm->barrier().wait(comm->options().timeout);
        healthy = true;
      } catch (...) {
      }
    }
    if (!healthy) comm->abort("World::shutdown after an error" + (failure.empty() ? "" : ": " + failure));
    if (healthy) {
      try {
        // "done": every rank passed the barrier, so no one still needs anybody's transport.
        if (store->add(key_prefix + "done", 1) == n) store->set(key_prefix + "done/all", "1");
        store->wait({key_prefix + "done/all"}, rendezvous_timeout);
        // "left": everyone's last store call is behind it, so rank 0 may stop the server.
        if (store->add(key_prefix + "left", 1) == n) store->set(key_prefix + "left/all", "1");
        if (env.rank == 0) store->wait({key_prefix + "left/all"}, rendezvous_timeout);
      } catch (...) {
      }
    }
  }
  heartbeat.reset();  // after the final barrier: a rank that finished first must not look frozen
  comm.reset();
  transport.reset();
  // An external store outlives the job: leave it as we found it, so a later job with the same
  // FSDP_RUN_ID starts clean.
  if (store && !store_server && env.rank == 0) {
    try {
      for (const char* k : {"job_id", "transport", "done", "done/all", "left", "left/all", "frozen"})
        store->erase(key_prefix + k);
      for (const char* k : {"transport", "host", "tcp", "ucx"}) {  // the acknowledgements of rank 0's verdicts
        for (const std::string& ack : verdict_keys(key_prefix + k, n)) store->erase(ack);
      }
      for (int r = 0; r < n; ++r) {
        store->erase(rank_key(key_prefix, "heartbeat", r));
        store->erase(rank_key(key_prefix, "host", r));
        store->erase(rank_key(key_prefix, "tcp", r));
        store->erase(rank_key(key_prefix, "ucx", r));
      }
    } catch (...) {
    }
  }
  store.reset();
  store_server.reset();
  if (!rendezvous_file.empty()) {
    ::unlink(rendezvous_file.c_str());
    rendezvous_file.clear();
  }
}

World connect_world(const ProcessEnv& env, const WorldOptions& options) {
  World w;
  w.env = env;
  w.secret = options.secret;
  w.rendezvous_timeout = options.rendezvous_timeout;
  w.key_prefix = options.key_prefix.empty() ? job_key_prefix() : options.key_prefix;
  const int rank = env.rank, n = env.world_size;
  const std::string requested = resolve_transport_request(options.transport);
  StartupDeadline deadline(options.rendezvous_timeout);  // every wait below shares it
  deadline.set_abandon(options.abandon);

  // 1. The store: the caller's, or found (or served) as the launcher said.
  std::string store_host = env.master_addr;
  uint16_t store_port = env.master_port;
  if (options.store) {
    w.store = options.store;
  } else {
    find_or_serve_store(w, env, options, deadline, store_host, store_port);
  }

  // 2. Job id and host identities, hence the topology.
  const HostInfo me = local_host_info(store_host, store_port);
  const std::vector<HostInfo> hosts = meet_hosts(w, me, deadline);
  // Everyone has reached the store: the file that pointed at it has done its job.
  if (!w.rendezvous_file.empty()) {
    ::unlink(w.rendezvous_file.c_str());
    w.rendezvous_file.clear();
  }
  std::vector<std::string> ids;
  for (const HostInfo& h : hosts) ids.push_back(h.id);
  w.topology = make_topology(ids, rank);

  // 3. The transport's name, agreed on; 4. the transport, connected.
  agree_transport(w, requested, hosts, deadline);
  note_if_unauthenticated(w, store_host);
  w.transport = build_transport(w, deadline, me);
  // Started: later reconnects (after the store's idle timeout) get their own full bound again.
  if (auto* client = dynamic_cast<StoreClient*>(w.store.get())) {
    client->set_reconnect_deadline(std::chrono::steady_clock::time_point::max());
  }

  // 5. The communicator, told the host layout so large collectives go hierarchical across hosts.
  w.comm = Communicator::create(w.transport, options.comm);
  w.comm->set_host_layout(w.topology.host_of_rank);

  // 6. Liveness, out of band: a frozen rank fails the job in heartbeat_timeout, not FSDP_TIMEOUT_SEC.
  // Over its own connection to our store; a caller's store gets no second user, and torchrun's agent
  // store speaks torch's protocol (the agent's own watchdog ends the job when a worker dies).
  if (!options.store && dynamic_cast<StoreClient*>(w.store.get()) && n > 1 && options.heartbeat_timeout.count() > 0) {
    w.heartbeat = std::make_unique<Heartbeat>(store_host, store_port, w.key_prefix, rank, n, w.transport,
                                              options.heartbeat_timeout, options.external_store ? -1 : 0,
                                              w.secret.key);
  }
  return w;
}

}  // namespace fsdp::launch
