#include "launch/world.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "common/atomic_file.h"
#include "common/knobs.h"
#include "collectives/core/errors.h"
#include "collectives/transports/shm.h"
#include "collectives/transports/hybrid.h"
#include "collectives/transports/tcp.h"
#ifdef FSDP_HAVE_UCX
#include "collectives/transports/ucx.h"
#endif
#ifdef FSDP_HAVE_MPI
#include "collectives/transports/mpi.h"
#endif

namespace fsdp::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string ms_text(milliseconds t) { return std::to_string(t.count()) + " ms"; }

std::string random_job_id() {
  std::random_device rd;
  const uint64_t v =
      (uint64_t{rd()} << 32) ^ rd() ^ (uint64_t(::getpid()) << 16) ^ uint64_t(Clock::now().time_since_epoch().count());
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

// The local address this host uses to reach host:port: a UDP socket "connected" there (no packet is
// sent) reports the source address routing picked. Two network namespaces of one kernel share
// hostname-independent boot ids but reach the store from different addresses, so this tells them apart.
std::string source_address_towards(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return "";
  std::string result;
  for (addrinfo* a = found; a && result.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr = local.ss_family == AF_INET6
                             ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, addr, text, sizeof(text))) result = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return result;
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

// --- Rendezvous without MASTER_* under a launcher that knows the job (mpirun, srun) on one host -----

// A name every rank of this launcher job shares and no other job has; empty when not under one.
std::string launcher_job_key() {
  std::string key = env_or("OMPI_MCA_ess_base_jobid", "");
  if (key.empty()) key = env_or("PMIX_NAMESPACE", "");
  if (key.empty() && std::getenv("SLURM_JOB_ID")) {
    key = env_or("SLURM_JOB_ID", "") + "." + env_or("SLURM_STEP_ID", "0");
  }
  for (char& c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  }
  return key;
}

std::string rendezvous_file_path(const std::string& key) {
  std::string dir = knobs::kRendezvousDir.is_set() ? knobs::kRendezvousDir.get() : env_or("TMPDIR", "/tmp");
  return dir + "/fsdp-rendezvous-" + key;
}

bool process_alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// Rank 0: "<port> <pid> <secret hex>", written to a temporary name and renamed so no reader sees half
// of it, readable by its owner only: the ranks of an mpirun job on one host are one user, so the
// file is the channel that hands them the job secret nobody configured.
void publish_rendezvous_file(const std::string& path, uint16_t port, const JobSecret& secret) {
  const std::string text =
      std::to_string(port) + ' ' + std::to_string(::getpid()) + ' ' + to_hex(secret.key) + '\n';
  if (const std::string error = write_file_atomically(path, text, 0600); !error.empty()) {
    throw CommError(ErrorContext{0, -1, "rendezvous", 0, 0}, "cannot publish the rendezvous file: " + error);
  }
}

// True when the file is ours and no one else may read or write it: a file someone else planted
// under the rendezvous name must not point us at their store nor hand us their secret.
bool owned_and_private(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0;
}

// Other ranks: the store's port and the job secret, once rank 0 (a live process) has written them.
uint16_t read_rendezvous_file(const std::string& path, int rank, milliseconds timeout, JobSecret* secret) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::ifstream in(path);
    long port = 0, pid = 0;
    std::string hex;
    if (owned_and_private(path) && in >> port >> pid >> hex && port > 0 && port < 65536 &&
        process_alive(static_cast<pid_t>(pid))) {
      std::string key;
      if (secret->empty() && from_hex(hex, &key)) *secret = JobSecret{key, "the rendezvous file " + path};
      return static_cast<uint16_t>(port);
    }
    if (Clock::now() > deadline) {
      throw TimeoutError(ErrorContext{rank, 0, "rendezvous", 0, 0},
                         "rank 0 never published the store's port in " + path + " within " + ms_text(timeout) +
                             " (FSDP_RENDEZVOUS_TIMEOUT_SEC; or set MASTER_ADDR and MASTER_PORT)");
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
}

StoreServerOptions server_options(const JobSecret& secret) {
  StoreServerOptions o = StoreServerOptions::from_env();
  o.secret = secret.key;
  return o;
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

// --- Store helpers with errors that say who waited for whom -----------------------------------------

std::string rank_key(const std::string& prefix, const char* what, int r) {
  return prefix + what + "/" + std::to_string(r);
}

// Gathers what every rank published under prefix+what+"/<r>"; a timeout names the ranks missing.
std::vector<std::string> gather_all(KeyValueStore& store, const std::string& prefix, const char* what, const World& w) {
  const int n = w.env.world_size;
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(rank_key(prefix, what, r));
  try {
    store.wait(keys, w.rendezvous_timeout);
  } catch (const TimeoutError&) {
    std::string missing_ranks, missing_keys;
    for (int r = 0; r < n; ++r) {
      try {
        store.get(keys[r], milliseconds(1));
      } catch (const CommError&) {
        missing_ranks += (missing_ranks.empty() ? "" : ", ") + std::to_string(r);
        missing_keys += (missing_keys.empty() ? "'" : ", '") + keys[r] + "'";
      }
    }
    throw TimeoutError(ErrorContext{w.env.rank, -1, "rendezvous", 0, 0},
                       "timed out after " + ms_text(w.rendezvous_timeout) + " waiting for key" +
                           (missing_keys.find(',') != std::string::npos ? "s " : " ") + missing_keys +
                           " at " + store.describe() + ": rank" +
                           (missing_ranks.find(',') != std::string::npos ? "s " : " ") + missing_ranks +
                           " never arrived (check they started; FSDP_RENDEZVOUS_TIMEOUT_SEC sets the bound)");
  }
  std::vector<std::string> values;
  for (const std::string& k : keys) values.push_back(store.get(k, w.rendezvous_timeout));
  return values;
}

// A key only rank 0 sets.
std::string get_from_rank0(KeyValueStore& store, const std::string& key, const World& w) {
  try {
    return store.get(key, w.rendezvous_timeout);
  } catch (const TimeoutError&) {
    throw TimeoutError(ErrorContext{w.env.rank, 0, "rendezvous", 0, 0},
                       "timed out after " + ms_text(w.rendezvous_timeout) + " waiting for key '" + key +
                           "' from rank 0 at " + store.describe() +
                           " (FSDP_RENDEZVOUS_TIMEOUT_SEC sets the bound)");
  }
}

constexpr const char* kErrorMark = "error:";

// Step 1 of connect_world without a caller's store: the rendezvous file under mpirun/srun on one host,
// rank 0's server, and this rank's client. store_host/store_port end as the address the client used.
void find_or_serve_store(World& w, const ProcessEnv& env, const WorldOptions& options, std::string& store_host,
                         uint16_t& store_port) {
  const int rank = env.rank, n = env.world_size;
  const ErrorContext ctx{rank, -1, "rendezvous", 0, 0};
  if (!store_host.empty() && store_port == 0) {
    throw InvalidArgument("rank " + std::to_string(rank) + ": MASTER_ADDR='" + store_host +
                          "' is set but MASTER_PORT is not (or FSDP_MASTER_PORT)");
  }
  if (store_host.empty() && n > 1) {
    const std::string key = launcher_job_key();
    if (options.external_store || key.empty() || env.local_world_size != n) {
      throw InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(n) + " (from " + env.source +
                            "): no rendezvous store named: set MASTER_ADDR and MASTER_PORT (or FSDP_MASTER_ADDR/"
                            "FSDP_MASTER_PORT) to rank 0's host and a free port. Only mpirun or srun with every "
                            "rank on one host finds the store without them");
    }
    const std::string path = rendezvous_file_path(key);
    store_host = "127.0.0.1";
    if (rank == 0) {
      if (w.secret.empty()) w.secret = generate_job_secret();
      w.store_server = std::make_unique<StoreServer>(store_host, 0, server_options(w.secret));
      store_port = w.store_server->port();
      publish_rendezvous_file(path, store_port, w.secret);
      w.rendezvous_file = path;  // rank 0's to remove, even when this rank fails
    } else {
      store_port = read_rendezvous_file(path, rank, options.rendezvous_timeout, &w.secret);
    }
  } else if (!store_host.empty() && rank == 0 && !options.external_store) {
    // Loopback stays loopback (nothing outside the host may talk to a single-host job's store);
    // otherwise every interface, since MASTER_ADDR may be a name or a NAT address of this host.
    w.store_server = std::make_unique<StoreServer>(is_loopback(store_host) ? store_host : "0.0.0.0", store_port,
                                                   server_options(w.secret));
  }
  if (!store_host.empty()) {
    StoreClientOptions so;
    so.connect_timeout = options.rendezvous_timeout;
    so.timeout = options.rendezvous_timeout;
    so.secret = w.secret.key;
    try {
      w.store = std::make_unique<StoreClient>(store_host, store_port, so);
    } catch (const TimeoutError& e) {
      throw TimeoutError(ctx, std::string(e.detail()) + (env.rank == 0 && options.external_store
                                                             ? " (FSDP_STORE_EXTERNAL is set: start fsdp-store first)"
                                                             : ""));
    }
  }
}


}  // namespace

// --- Options -------------------------------------------------------------------------------------

milliseconds rendezvous_timeout_from_env() {
  return milliseconds(static_cast<long long>(knobs::kRendezvousTimeoutSec.get() * 1000.0));
}

bool store_external_from_env() { return knobs::kStoreExternal.get(); }

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
  w.key_prefix = options.key_prefix.empty() ? "fsdp/" + knobs::kRunId.get() + "/" : options.key_prefix;
  const int rank = env.rank, n = env.world_size;
  const std::string requested = resolve_transport_request(options.transport);

  // 1. The store: the caller's, or found (or served) as the launcher said.
  std::string store_host = env.master_addr;
  uint16_t store_port = env.master_port;
  if (options.store) {
    w.store = options.store;
  } else {
    find_or_serve_store(w, env, options, store_host, store_port);
  }

  // 2. Job id and host identities.
  const HostInfo me = local_host_info(store_host, store_port);
  std::vector<HostInfo> hosts;
  if (!w.store) {
    w.job_id = random_job_id();
    hosts.push_back(me);
  } else {
    if (rank == 0) {
      w.job_id = random_job_id();
      w.store->set(w.key_prefix + "job_id", w.job_id);
    }
    w.store->set(rank_key(w.key_prefix, "host", rank), me.encode());
    for (const std::string& text : gather_all(*w.store, w.key_prefix, "host", w))
      hosts.push_back(HostInfo::decode(text));
    if (rank != 0) w.job_id = get_from_rank0(*w.store, w.key_prefix + "job_id", w);
  }
  // Everyone has reached the store: the file that pointed at it has done its job.
  if (!w.rendezvous_file.empty()) {
    ::unlink(w.rendezvous_file.c_str());
    w.rendezvous_file.clear();
  }
  std::vector<std::string> ids;
  for (const HostInfo& h : hosts) ids.push_back(h.id);
  w.topology = make_topology(ids, rank);

  // 3. The transport, decided by rank 0 so that every rank agrees even if their environments differ.
  if (!w.store) {
    w.transport_name = choose_transport(requested, w.topology, {me.describe()});
  } else {
    const std::string key = w.key_prefix + "transport";
    if (rank == 0) {
      std::vector<std::string> names(w.topology.host_count);
      for (int r = n - 1; r >= 0; --r) names[w.topology.host_of_rank[r]] = hosts[r].describe();
      try {
        w.transport_name = choose_transport(requested, w.topology, names);
      } catch (const InvalidArgument& e) {
        w.store->set(key, kErrorMark + std::string(e.what()));  // the others fail with the same words
        throw;
      }
      w.store->set(key, w.transport_name);
    } else {
      const std::string chosen = get_from_rank0(*w.store, key, w);
      if (chosen.rfind(kErrorMark, 0) == 0) {
        throw InvalidArgument("rank " + std::to_string(rank) +
                              ": rank 0 refused the job: " + chosen.substr(std::strlen(kErrorMark)));
      }
      if (requested != "auto" && requested != chosen) {
        throw InvalidArgument("rank " + std::to_string(rank) + " asked for transport " + requested +
                              " but rank 0 chose " + chosen + ": set the same FSDP_TRANSPORT on every rank");
      }
      w.transport_name = chosen;
    }
  }

  note_if_unauthenticated(w, store_host);

  // 4. Connect: one transport, or shared memory within each host plus the network between them.
  auto network = [&](const std::string& name) -> std::shared_ptr<Transport> {
#ifdef FSDP_HAVE_UCX
    if (name == "ucx") {
      // Worker addresses through the store: publish ucx/<rank>, gather everyone's.
      auto exchange = [&](const std::string& mine) {
        if (!w.store) return std::vector<std::string>{mine};
        w.store->set(rank_key(w.key_prefix, "ucx", rank), mine);
        return gather_all(*w.store, w.key_prefix, "ucx", w);
      };
      UcxOptions ucx;
      ucx.secret = w.secret.key;
      return make_ucx_transport(rank, n, exchange, options.rendezvous_timeout, ucx);
    }
#endif
#ifdef FSDP_HAVE_MPI
    if (name == "mpi") return make_mpi_transport(rank, n, options.rendezvous_timeout);  // MPI knows where everyone is
#endif
    // Listen on the address this rank reaches the store from: the one its peers can reach it at.
    TcpListener listener = TcpListener::bind(me.address);
    std::vector<TcpEndpoint> peers(n);
    if (w.store) {
      w.store->set(rank_key(w.key_prefix, "tcp", rank), listener.address());
      const auto addresses = gather_all(*w.store, w.key_prefix, "tcp", w);
      for (int r = 0; r < n; ++r) peers[r] = TcpEndpoint::parse(addresses[r]);
    } else {
      peers[0] = listener.endpoint();
    }
    TcpOptions tcp = TcpOptions::from_env();
    tcp.secret = w.secret.key;
    return make_tcp_transport(rank, n, std::move(listener), peers, options.rendezvous_timeout, tcp);
  };
  if (w.transport_name == "shm") {
    w.transport = make_shm_transport(w.job_id, rank, n, options.rendezvous_timeout);
  } else if (w.transport_name.rfind("shm+", 0) == 0) {
    // One segment per host, named after the job and the host, over the host's ranks alone.
    const auto& t = w.topology;
    auto local = make_shm_transport(w.job_id + "-h" + std::to_string(t.host_index), t.local_rank, t.local_size,
                                    options.rendezvous_timeout);
    w.transport = make_hybrid_transport(rank, t.host_of_rank, std::move(local), network(w.transport_name.substr(4)));
  } else {
    w.transport = network(w.transport_name);
  }

  // 5. The communicator, told the host layout so large collectives go hierarchical across hosts.
  w.comm = Communicator::create(w.transport, options.comm);
  w.comm->set_host_layout(w.topology.host_of_rank);

  // 6. Liveness, out of band: a frozen rank fails the job in heartbeat_timeout, not FSDP_TIMEOUT_SEC.
  // Over its own connection to our store; a caller's store (torch's) gets no second user.
  if (w.store && !options.store && n > 1 && options.heartbeat_timeout.count() > 0) {
    w.heartbeat = std::make_unique<Heartbeat>(store_host, store_port, w.key_prefix, rank, n, w.transport,
                                              options.heartbeat_timeout, options.external_store ? -1 : 0,
                                              w.secret.key);
  }
  return w;
}

}  // namespace fsdp::launch
