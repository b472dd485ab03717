// fsdp-run: the launcher. Starts N copies of a program with torchrun's variables set, tags their
// output lines with the rank, and when one fails stops the rest and exits with its status.
//
//   fsdp-run --nproc 4 -- ./train --config llama.toml
//   fsdp-run --nnodes 2 --node-rank K --nproc 4 --master-addr 10.0.0.7 --master-port 29500 -- ./train
//
// Across nodes node 0's fsdp-run serves the store, the others' connect to it, and the launchers tell
// each other of failures through it (fsdp_run_nodes.h): a rank failing on any node stops them all, and
// under --max-restarts they agree through it on each restart.
//
// With --max-restarts K a failed job is stopped and started again (the same command and store, each start's
// keys under their own attempt), at most K times; fsdp-train resumes from its latest checkpoint.
//
// By default fsdp-run serves the rendezvous store itself (like torchrun's agent) on
// --master-addr:--master-port (port 0: a free one, bound before any child starts, so no race) and sets
// FSDP_STORE_EXTERNAL=1; with --no-store rank 0 serves it. Every job is authenticated: the secret
// from FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE, else a fresh one per job, reaches the ranks in
// FSDP_JOB_SECRET (never on a command line). docs/launch.md describes every option.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/job_secret.h"
#include "common/knobs.h"
#include "launch/host_address.h"
#include "launch/store.h"
#include "launch/thread_budget.h"
#include "launch/tools/fsdp_run_args.h"
#include "launch/tools/fsdp_run_job.h"
#include "launch/world.h"  // job_key_prefix_of_attempt

extern char** environ;

namespace fsdp::launch::run {
namespace {

// The program's path, searched in PATH now: between fork() and exec only async-signal-safe calls are
// allowed (the store server thread may hold malloc's lock), so execve, not execvp.
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  std::fprintf(stderr, "fsdp-run: %s: command not found in PATH\n", program.c_str());
  std::exit(127);
}

// A free TCP port for rank 0 to serve on (--no-store): bound and released, so a small race remains.
uint16_t pick_free_port(const std::string& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(sa);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    std::fprintf(stderr, "fsdp-run: cannot find a free port on %s: %s\n", addr.c_str(), std::strerror(errno));
    std::exit(1);
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

// The rendezvous store fsdp-run serves (unless --no-store) and the port the ranks are told.
struct Rendezvous {
  std::unique_ptr<fsdp::launch::StoreServer> store;
  uint16_t port = 0;
};

Rendezvous open_rendezvous(const Args& a) {
  Rendezvous r;
  r.port = static_cast<uint16_t>(a.master_port);
  if (a.serve_store && a.node_rank == 0) {
    try {
      r.store = std::make_unique<StoreServer>(is_loopback(a.master_addr) ? a.master_addr : "0.0.0.0", r.port);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fsdp-run: cannot serve the rendezvous store: %s\n", e.what());
      std::exit(1);
    }
    r.port = r.store->port();
  } else if (r.port == 0) {
    r.port = pick_free_port(a.master_addr);
  }
  return r;
}

// What each start of the job tells its ranks about restarts (ours and torchrun's names), replaced in
// every rank's environment before each start.
constexpr const char* kRestartVariables[] = {"FSDP_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT", "FSDP_MAX_RESTARTS",
                                             "TORCHELASTIC_MAX_RESTARTS", "FSDP_RESTART_CAUSE"};

// Start `attempt` of the job (0: the first), after `cause` ended the previous one.
void set_restart_variables(std::vector<std::vector<std::string>>& envs, const Args& a, int attempt,
                           const std::string& cause) {
  for (auto& e : envs) {
    std::erase_if(e, [](const std::string& kv) {
      for (const char* name : kRestartVariables) {
        if (kv.rfind(std::string(name) + "=", 0) == 0) return true;
      }
      return false;
    });
    for (const char* name : {"FSDP_RESTART_COUNT=", "TORCHELASTIC_RESTART_COUNT="})
      e.push_back(name + std::to_string(attempt));
    for (const char* name : {"FSDP_MAX_RESTARTS=", "TORCHELASTIC_MAX_RESTARTS="})
      e.push_back(name + std::to_string(a.max_restarts));
    if (attempt > 0) e.push_back("FSDP_RESTART_CAUSE=" + cause);
  }
}

// Every rank's environment, built before forking. Our variables replace inherited ones, and variables
// of other launchers go, so detect_process_env never mixes two launchers' views. FSDP_STORE_EXTERNAL
// is ours only when we serve the store: with --no-store it may point rank 0 at an fsdp-store.
// Unless the user chose a thread count, each rank gets its share of the cores (`budget`).
std::vector<std::vector<std::string>> rank_environments(const Args& a, const Rendezvous& rv,
                                                        const fsdp::launch::ThreadBudget& budget) {
  using fsdp::launch::thread_budget_env;
  std::vector<std::string> ours = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",       "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                   "MASTER_ADDR", "MASTER_PORT", "FSDP_MASTER_ADDR", "FSDP_MASTER_PORT"};
  for (const char* restart : kRestartVariables) ours.push_back(restart);
  if (a.serve_store) ours.push_back("FSDP_STORE_EXTERNAL");  // node 0's fsdp-run serves it
  std::vector<std::string> base;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool drop = false;
    for (const auto& o : ours) drop |= name == o;
    drop |= name.rfind("OMPI_COMM_WORLD_", 0) == 0 || name == "SLURM_PROCID" || name == "SLURM_LOCALID";
    if (!drop) base.push_back(kv);
  }
  std::vector<std::vector<std::string>> envs(a.nproc, base);
  for (int r = 0; r < a.nproc; ++r) {
    auto& e = envs[r];
    e.push_back("RANK=" + std::to_string(a.first_rank() + r));
    e.push_back("WORLD_SIZE=" + std::to_string(a.world_size()));
    e.push_back("LOCAL_RANK=" + std::to_string(r));
    e.push_back("LOCAL_WORLD_SIZE=" + std::to_string(a.nproc));
    e.push_back("GROUP_RANK=" + std::to_string(a.node_rank));
    e.push_back("MASTER_ADDR=" + a.master_addr);
    e.push_back("MASTER_PORT=" + std::to_string(rv.port));
    if (a.serve_store) e.push_back("FSDP_STORE_EXTERNAL=1");
    for (const auto& kv : thread_budget_env(budget)) e.push_back(kv);
  }
  return envs;
}

// Across nodes: this launcher's link to node 0's store (node 0 reaches its own on the loopback) for
// start `attempt` of the job; exits when the store cannot be reached.
std::unique_ptr<NodeLink> open_link(const Args& a, uint16_t port, int attempt) {
  const std::string host = a.node_rank == 0 && !is_loopback(a.master_addr) ? "127.0.0.1" : a.master_addr;
  try {
    return std::make_unique<NodeLink>(a, host, port, attempt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: node %d: cannot reach node 0's store at %s:%u: %s\n", a.node_rank,
                 a.master_addr.c_str(), port, e.what());
    std::exit(1);
  }
}

// Fault-tolerance mode's view of the store served here (single node only: across nodes each launcher
// would have to learn of the others' exits, left for later). Null when this fsdp-run serves none.
std::unique_ptr<StoreClient> open_fault_tolerance_store(const Args& a, const Rendezvous& rv) {
  if (!rv.store || a.multi_node()) return nullptr;
  StoreClientOptions options;  // the job secret settle_job_secret put in the environment
  options.connect_timeout = std::chrono::seconds(5);
  options.timeout = std::chrono::seconds(5);
  try {
    return std::make_unique<StoreClient>(is_loopback(a.master_addr) ? a.master_addr : "127.0.0.1", rv.port, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: cannot reach the store it serves: %s (fault tolerance off)\n", e.what());
    return nullptr;
  }
}

template <class T>
T knob_or_exit(const fsdp::knobs::Knob<T>& knob) {
  try {
    return knob.get();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: %s\n", e.what());
    std::exit(2);
  }
}

}  // namespace

// The job's secret, put in this process's environment as FSDP_JOB_SECRET so that the store served
// here and every rank (their environments copy ours) hold the same one. Generated when none is
// configured, except when the ranks use a store someone else serves (--no-store with
// FSDP_STORE_EXTERNAL): that store's secret can only come from the user.
void settle_job_secret(const Args& a) {
  fsdp::JobSecret secret;
  bool external_store = false;
  try {
    secret = fsdp::job_secret_from_env();
    external_store = !a.serve_store && fsdp::knobs::kStoreExternal.get();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: %s\n", e.what());
    std::exit(2);
  }
  if (secret.empty()) {
    if (external_store) return;
    if (a.multi_node()) {
      std::fprintf(stderr,
                   "fsdp-run: --nnodes %d: every node needs the same job secret, and one node cannot make it for "
                   "the others: set FSDP_JOB_SECRET (e.g. $(openssl rand -hex 32)) or FSDP_JOB_SECRET_FILE (a chmod "
                   "600 file) to the same value on every node\n",
                   a.nnodes);
      std::exit(2);
    }
    secret = fsdp::generate_job_secret();
  }
  ::setenv(std::string(fsdp::knobs::kJobSecret.env).c_str(), fsdp::to_hex(secret.key).c_str(), 1);
  ::unsetenv(std::string(fsdp::knobs::kJobSecretFile.env).c_str());
}

}  // namespace fsdp::launch::run

int main(int argc, char** argv) {
  using namespace fsdp::launch::run;
  const Args a = parse(argc, argv);
  settle_job_secret(a);
  const double grace_sec = knob_or_exit(fsdp::knobs::kRunGraceSec);
  const double term_delay_sec = knob_or_exit(fsdp::knobs::kRunTermDelaySec);
  const std::string program = resolve_program(a.command[0]);
  const Rendezvous rendezvous = open_rendezvous(a);
  const fsdp::launch::ThreadBudget budget = fsdp::launch::decide_thread_budget(
      fsdp::launch::available_cores(), a.nproc, fsdp::launch::user_set_thread_count());
  if (!budget.from_user) std::fprintf(stderr, "fsdp-run: %s\n", budget.describe.c_str());
  auto envs = rank_environments(a, rendezvous, budget);

  catch_signals();
  const std::unique_ptr<fsdp::launch::StoreClient> ft_store = open_fault_tolerance_store(a, rendezvous);

  // --max-restarts: a failed start is followed by another, same command, same store (its keys of start k
  // under fsdp/<FSDP_RUN_ID>/attempt<k>/, launch/world.h), until one succeeds or the restarts run out.
  // Across nodes every launcher (node 0's to its own store) watches for the others' failures, and all
  // agree on each restart through the store (fsdp_run_nodes.h).
  std::string cause;
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<NodeLink> link = a.multi_node() ? open_link(a, rendezvous.port, attempt) : nullptr;
    set_restart_variables(envs, a, attempt, cause);
    Job job(a, grace_sec, term_delay_sec);
    job.link(link.get());
    std::unique_ptr<FaultToleranceLink> ft;
    if (ft_store) {
      ft = std::make_unique<FaultToleranceLink>(*ft_store, fsdp::launch::job_key_prefix_of_attempt(attempt));
      job.fault_tolerance(ft.get());
    }
    if (!job.start(program, envs)) return 1;
    Outcome o = job.supervise();
    if (link && a.max_restarts > 0) o = link->agree(o);
    if (o.rank_failed && attempt < a.max_restarts) {
      cause = o.what;
      std::fprintf(stderr,
                   "fsdp-run: restart %d of %d: %s; starting all %d ranks again with FSDP_RESTART_COUNT=%d (a program "
                   "that saves checkpoints resumes from its latest, else it starts over from step 0)\n",
                   attempt + 1, a.max_restarts, o.what.c_str(), a.world_size(), attempt + 1);
      continue;
    }
    if (!o.what.empty()) {
      std::fprintf(stderr, "fsdp-run: failed: %s%s\n", o.what.c_str(),
                   o.rank_failed && a.max_restarts > 0
                       ? (" (no restart left: " + std::to_string(a.max_restarts) + " used)").c_str()
                       : "");
    }
    if (link) link->finish();
    return o.status;
  }
}
