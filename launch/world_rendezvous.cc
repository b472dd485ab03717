#include "launch/world_rendezvous.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "collectives/types/errors.h"
#include "common/atomic_file.h"
#include "common/knobs.h"
#include "launch/host_address.h"
#include "launch/torchrun_store.h"

namespace fsdp::launch {
namespace {

using std::chrono::milliseconds;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string ms_text(milliseconds t) { return std::to_string(t.count()) + " ms"; }

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
  const std::string text = std::to_string(port) + ' ' + std::to_string(::getpid()) + ' ' + to_hex(secret.key) + '\n';
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
uint16_t read_rendezvous_file(const std::string& path, int rank, const StartupDeadline& deadline, JobSecret* secret) {
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
    if (deadline.remaining().count() == 0) {
      throw TimeoutError(ErrorContext{rank, 0, "rendezvous", 0, 0},
                         "rank 0 never published the store's port in " + path + " within " + ms_text(deadline.total()) +
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

}  // namespace

std::string rank_key(const std::string& prefix, const char* what, int r) {
  return prefix + what + "/" + std::to_string(r);
}

namespace {

constexpr const char* kVerdictMark = "error:";
// How long (at most; never more than the rendezvous timeout) rank 0, having given up on a gather,
// keeps the store up for the ranks that did arrive to read why: they are parked in the same gather,
// so they read it in one round trip, and those that gave up by themselves say so at once.
constexpr milliseconds kVerdictLinger{5000};
constexpr milliseconds kAbandonSlice{20};

// store.wait(keys) within what is left of `deadline`; in slices where the deadline can be abandoned, whose
// reason, once given, ends the wait with PeerLostError.
void wait_keys(KeyValueStore& store, const std::vector<std::string>& keys, const StartupDeadline& deadline, int rank) {
  if (!deadline.can_abandon()) return store.wait(keys, deadline.remaining());
  for (;;) {
    const milliseconds left = deadline.remaining();
    try {
      store.wait(keys, std::min(left, kAbandonSlice));
      return;
    } catch (const TimeoutError&) {
      if (left <= kAbandonSlice) throw;
    }
    if (const std::string why = deadline.abandoned(); !why.empty()) {
      const std::string& k = keys.front();  // a gather's keys: "<prefix><what>/<rank>"
      const std::string waited =
          keys.size() == 1 ? "'" + k + "'" : "every rank's '" + k.substr(0, k.rfind('/')) + "/<rank>'";
      throw PeerLostError(ErrorContext{rank, -1, "rendezvous", 0, 0},
                          "start-up abandoned waiting for " + waited + ": " + why);
    }
  }
}

bool is_verdict(const std::string& value) { return value.rfind(kVerdictMark, 0) == 0; }

std::string plural(const std::string& list, const char* one, const char* many) {
  return list.find(',') != std::string::npos ? many : one;
}

// This rank read rank 0's verdict under `key`, or failed the same way by itself: say so (rank 0 waits
// for that before it goes).
void acknowledge_verdict(KeyValueStore& store, const std::string& key, int rank) {
  try {
    store.set(rank_key(key + "/", "read", rank), "1");
  } catch (const std::exception&) {
    // rank 0 stopped waiting (its deadline passed): nothing more to tell it
  }
}

// The keys of a gather still missing after its wait: one look per key, none waiting. A store that
// stops answering (rank 0, its server, gone) ends the look: said as such, not blamed on the ranks.
struct Missing {
  std::vector<int> ranks;
  std::string rank_list, key_list, store_lost;
};

Missing look_for_missing(KeyValueStore& store, const std::vector<std::string>& keys) {
  Missing m;
  for (size_t r = 0; r < keys.size() && m.store_lost.empty(); ++r) {
    try {
      store.get(keys[r], milliseconds(0));
    } catch (const TimeoutError&) {
      m.ranks.push_back(static_cast<int>(r));
      m.rank_list += (m.rank_list.empty() ? "" : ", ") + std::to_string(r);
      m.key_list += (m.key_list.empty() ? "'" : ", '") + keys[r] + "'";
    } catch (const CommError& e) {
      m.store_lost = e.detail();
    }
  }
  return m;
}

// Rank 0 gave up on a gather: its words go into the missing keys, which wakes every rank parked in
// the same gather, and it keeps the store up until each rank that arrived has read them.
void publish_gather_verdict(KeyValueStore& store, const std::string& key, const std::vector<std::string>& keys,
                            const Missing& m, const std::string& why, milliseconds linger) {
  std::vector<std::string> acks;
  try {
    for (int r : m.ranks) store.set(keys[static_cast<size_t>(r)], kVerdictMark + why);
    for (int r = 1; r < static_cast<int>(keys.size()); ++r) {
      if (std::find(m.ranks.begin(), m.ranks.end(), r) == m.ranks.end()) acks.push_back(rank_key(key + "/", "read", r));
    }
    store.wait(acks, linger);
  } catch (const std::exception&) {
    // an arrived rank that did not read it fails on its own deadline
  }
}

}  // namespace

std::vector<std::string> gather_all(KeyValueStore& store, const std::string& prefix, const char* what, int rank,
                                    int world_size, const StartupDeadline& deadline) {
  const std::string key = prefix + what;
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(rank_key(prefix, what, r));
  try {
    wait_keys(store, keys, deadline, rank);
  } catch (const TimeoutError&) {
    const Missing m = look_for_missing(store, keys);
    const std::string head = "timed out after " + ms_text(deadline.total()) + " (the whole start-up's bound) ";
    const std::string bound = "FSDP_RENDEZVOUS_TIMEOUT_SEC sets the bound)";
    if (!m.store_lost.empty()) {
      throw TimeoutError(ErrorContext{rank, -1, "rendezvous", 0, 0},
                         head + "waiting for every rank's '" + key + "/<rank>' key at " + store.describe() +
                             ", which then stopped answering: " + m.store_lost + " (" + bound);
    }
    if (!m.ranks.empty()) {
      const std::string why = head + "waiting for " + plural(m.key_list, "key ", "keys ") + m.key_list + " at " +
                              store.describe() + ": " + plural(m.rank_list, "rank ", "ranks ") + m.rank_list +
                              " never arrived (check they started; " + bound;
      // Rank 0 tells the others; another rank that gave up by itself tells rank 0 not to wait for it.
      if (rank == 0) {
        publish_gather_verdict(store, key, keys, m, why, std::min(deadline.total(), kVerdictLinger));
      } else {
        acknowledge_verdict(store, key, rank);
      }
      throw TimeoutError(ErrorContext{rank, -1, "rendezvous", 0, 0}, why);
    }
    // Every key arrived just after the wait gave up (rank 0's verdict among them, perhaps): read them.
  }
  std::vector<std::string> values;
  for (const std::string& k : keys) values.push_back(store.get(k, deadline.remaining()));
  for (const std::string& v : values) {
    if (!is_verdict(v)) continue;
    acknowledge_verdict(store, key, rank);
    throw TimeoutError(ErrorContext{rank, 0, "rendezvous", 0, 0},
                       "rank 0 gave up: " + v.substr(std::strlen(kVerdictMark)));
  }
  return values;
}

std::string get_from_rank0(KeyValueStore& store, const std::string& key, int rank, const StartupDeadline& deadline) {
  std::string value;
  try {
    wait_keys(store, {key}, deadline, rank);
    value = store.get(key, deadline.remaining());
  } catch (const TimeoutError&) {
    throw TimeoutError(ErrorContext{rank, 0, "rendezvous", 0, 0},
                       "timed out after " + ms_text(deadline.total()) +
                           " (the whole start-up's bound) waiting for key '" + key + "' from rank 0 at " +
                           store.describe() + " (FSDP_RENDEZVOUS_TIMEOUT_SEC sets the bound)");
  }
  if (!is_verdict(value)) return value;
  // Rank 0 refused the job and keeps the store up until everyone has read why: say so, then fail.
  acknowledge_verdict(store, key, rank);
  throw InvalidArgument("rank " + std::to_string(rank) +
                        ": rank 0 refused the job: " + value.substr(std::strlen(kVerdictMark)));
}

std::vector<std::string> verdict_keys(const std::string& key, int world_size) {
  std::vector<std::string> keys;
  for (int r = 1; r < world_size; ++r) keys.push_back(rank_key(key + "/", "read", r));
  return keys;
}

void publish_verdict(KeyValueStore& store, const std::string& key, const std::string& why, int world_size,
                     const StartupDeadline& deadline) {
  try {
    store.set(key, kVerdictMark + why);
    store.wait(verdict_keys(key, world_size), deadline.remaining());
  } catch (const std::exception&) {
    // a rank that never read it fails on its own deadline; rank 0's own error is the one to throw
  }
}

void find_or_serve_store(World& w, const ProcessEnv& env, const WorldOptions& options, const StartupDeadline& deadline,
                         std::string& store_host, uint16_t& store_port) {
  const int rank = env.rank, n = env.world_size;
  const ErrorContext ctx{rank, -1, "rendezvous", 0, 0};
  // torchrun's agent already serves a store on MASTER_ADDR:MASTER_PORT: join it (torchrun_store.h).
  if (auto torch = join_torchrun_store(env, options.external_store, options.rendezvous_timeout)) {
    w.store = std::move(torch);
    return;
  }
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
      store_port = read_rendezvous_file(path, rank, deadline, &w.secret);
    }
  } else if (!store_host.empty() && rank == 0 && !options.external_store) {
    // Loopback stays loopback (nothing outside the host may talk to a single-host job's store);
    // otherwise every interface, since MASTER_ADDR may be a name or a NAT address of this host.
    w.store_server = std::make_unique<StoreServer>(is_loopback(store_host) ? store_host : "0.0.0.0", store_port,
                                                   server_options(w.secret));
  }
  if (!store_host.empty()) {
    StoreClientOptions so;
    so.connect_timeout = deadline.remaining();
    so.timeout = options.rendezvous_timeout;  // each later call's bound (shutdown's), not the start-up's
    so.secret = w.secret.key;
    so.rank = rank;
    try {
      auto client = std::make_shared<StoreClient>(store_host, store_port, so);
      client->set_reconnect_deadline(deadline.at());
      w.store = std::move(client);
    } catch (const TimeoutError& e) {
      throw TimeoutError(ctx, std::string(e.detail()) + (env.rank == 0 && options.external_store
                                                             ? " (FSDP_STORE_EXTERNAL is set: start fsdp-store first)"
                                                             : ""));
    }
  }
}

}  // namespace fsdp::launch
