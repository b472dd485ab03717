// fsdp-run: the local launcher. Starts N copies of a program with torchrun's variables set, tags
// their output lines with the rank, and when one fails stops the rest and exits with its status.
//
//   fsdp-run --nproc 4 -- ./train --config llama.toml
//
// By default fsdp-run serves the rendezvous store itself (like torchrun's agent) on
// --master-addr:--master-port (port 0: a free one, bound before any child starts, so no race) and sets
// FSDP_STORE_EXTERNAL=1; with --no-store rank 0 serves it. Every job is authenticated: the secret
// from FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE, else a fresh one per job, reaches the ranks in
// FSDP_JOB_SECRET (never on a command line). docs/launch.md describes every option.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_secret.h"
#include "common/knobs.h"
#include "launch/store.h"
#include "launch/thread_budget.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int nproc = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool tag_output = true;
  bool serve_store = true;
  bool bind_to_core = false;  // --bind-to core: local rank r on the r-th CPU fsdp-run may use
  std::vector<std::string> command;
};

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "fsdp-run: %s\n", error.c_str());
  std::fprintf(stderr,
               "usage: fsdp-run --nproc N [--master-addr A] [--master-port P (0: a free port)] "
               "[--tag-output|--no-tag-output] [--no-store] [--bind-to core|none] -- PROGRAM ARGS...\n"
               "  sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT in each child;\n"
               "  --bind-to core pins rank r to the r-th CPU of fsdp-run's affinity (as mpirun --bind-to core;\n"
               "  refused when there are more ranks than CPUs); default none\n"
               "  FSDP_RUN_GRACE_SEC (default 5): SIGTERM to SIGKILL; FSDP_RUN_TERM_DELAY_SEC (default 1): how long\n"
               "  the others may fail on their own after a rank failed before they get SIGTERM\n");
  std::exit(error.empty() ? 0 : 2);
}

int parse_int(const std::string& flag, const std::string& text, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo || v > hi) {
    usage(flag + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text + "'");
  }
  return static_cast<int>(v);
}

Args parse(int argc, char** argv) {
  Args a;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) usage(flag + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string k = argv[i];
    std::optional<std::string> inline_value;
    if (k.rfind("--", 0) == 0 && k.find('=') != std::string::npos) {
      inline_value = k.substr(k.find('=') + 1);
      k = k.substr(0, k.find('='));
    }
    auto v = [&] { return inline_value ? *inline_value : value(k); };
    if (k == "--") {
      ++i;
      break;
    } else if (k == "--nproc" || k == "--nproc-per-node" || k == "--nproc_per_node") {
      a.nproc = parse_int(k, v(), 1, 4096);
    } else if (k == "--master-addr" || k == "--master_addr") {
      a.master_addr = v();
    } else if (k == "--master-port" || k == "--master_port") {
      a.master_port = parse_int(k, v(), 0, 65535);
    } else if (k == "--tag-output") {
      a.tag_output = true;
    } else if (k == "--no-tag-output") {
      a.tag_output = false;
    } else if (k == "--no-store") {
      a.serve_store = false;
    } else if (k == "--bind-to" || k == "--bind_to") {
      const std::string what = v();
      if (what != "core" && what != "none") usage("--bind-to wants core or none, got '" + what + "'");
      a.bind_to_core = what == "core";
    } else if (k == "-h" || k == "--help") {
      usage("");
    } else if (k.rfind("-", 0) == 0) {
      usage("unknown option '" + k + "'");
    } else {
      break;  // the program, without "--"
    }
  }
  for (; i < argc; ++i) a.command.push_back(argv[i]);
  if (a.nproc < 1) usage("--nproc N is required");
  if (a.command.empty()) usage("no program given (fsdp-run --nproc N -- PROGRAM ARGS...)");
  return a;
}

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

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + " (SIG" + (name ? name : "?") + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// One child's output stream (stdout or stderr): bytes not yet ending in a newline wait in `pending`.
struct Stream {
  int fd = -1;
  int out_fd = 1;
  std::string prefix;
  std::string pending;
};

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // our own output is gone (closed pipe): nothing better to do than drop it
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Emits every complete line with its prefix, one write per line, so lines of different ranks never
// mix. A line longer than 64 KiB is cut rather than held.
void emit(Stream& s, bool flush_partial) {
  constexpr size_t kMaxLine = 64 << 10;
  size_t start = 0;
  for (;;) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) {
      if (s.pending.size() - start >= kMaxLine || (flush_partial && s.pending.size() > start)) {
        nl = s.pending.size();
      } else {
        break;
      }
    }
    std::string line = s.prefix;
    line.append(s.pending, start, nl - start);
    line.push_back('\n');
    write_all(s.out_fd, line.data(), line.size());
    start = std::min(nl + 1, s.pending.size());
  }
  s.pending.erase(0, start);
}

// Reads what is there; false at end of file.
bool pump(Stream& s) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.pending.append(buf, static_cast<size_t>(n));
      emit(s, false);
      if (static_cast<size_t>(n) < sizeof(buf)) return true;
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && errno == EAGAIN) return true;
    emit(s, true);
    ::close(s.fd);
    s.fd = -1;
    return false;
  }
}

struct Child {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int stop_signal = 0;  // the signal that stopped it (SIGSTOP, SIGTSTP...) while stopped, else 0
};

// The rendezvous store fsdp-run serves (unless --no-store) and the port the ranks are told.
struct Rendezvous {
  std::unique_ptr<fsdp::launch::StoreServer> store;
  uint16_t port = 0;
};

Rendezvous open_rendezvous(const Args& a) {
  Rendezvous r;
  r.port = static_cast<uint16_t>(a.master_port);
  if (a.serve_store) {
    const bool loopback = a.master_addr.rfind("127.", 0) == 0 || a.master_addr == "localhost";
    try {
      r.store = std::make_unique<fsdp::launch::StoreServer>(loopback ? a.master_addr : "0.0.0.0", r.port);
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

// Every rank's environment, built before forking. Our variables replace inherited ones, and variables
// of other launchers go, so detect_process_env never mixes two launchers' views. FSDP_STORE_EXTERNAL
// is ours only when we serve the store: with --no-store it may point rank 0 at an fsdp-store.
// Unless the user chose a thread count, each rank gets its share of the cores (`budget`).
std::vector<std::vector<std::string>> rank_environments(const Args& a, const Rendezvous& rv,
                                                        const fsdp::launch::ThreadBudget& budget) {
  using fsdp::launch::thread_budget_env;
  std::vector<std::string> ours = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",       "LOCAL_WORLD_SIZE",
                                   "MASTER_ADDR", "MASTER_PORT", "FSDP_MASTER_ADDR", "FSDP_MASTER_PORT"};
  if (rv.store) ours.push_back("FSDP_STORE_EXTERNAL");
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
    e.push_back("RANK=" + std::to_string(r));
    e.push_back("WORLD_SIZE=" + std::to_string(a.nproc));
    e.push_back("LOCAL_RANK=" + std::to_string(r));
    e.push_back("LOCAL_WORLD_SIZE=" + std::to_string(a.nproc));
    e.push_back("MASTER_ADDR=" + a.master_addr);
    e.push_back("MASTER_PORT=" + std::to_string(rv.port));
    if (rv.store) e.push_back("FSDP_STORE_EXTERNAL=1");
    for (const auto& kv : thread_budget_env(budget)) e.push_back(kv);
  }
  return envs;
}

std::vector<char*> c_array(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (auto& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// The ranks of one job: started together, their output tagged, the first failure ending the rest.
class Job {
 public:
  Job(const Args& a, double grace_sec, double term_delay_sec)
      : a_(a), grace_sec_(grace_sec), term_delay_sec_(term_delay_sec), children_(a.nproc) {}

  // Forks every rank; false when a pipe could not be made (nothing more is started then).
  bool start(const std::string& program, std::vector<std::vector<std::string>>& envs);
  // Relays output, forwards signals and reaps ranks until all ended; returns fsdp-run's exit status.
  int supervise();

 private:
  int alive() const {
    int n = 0;
    for (const Child& c : children_) n += c.running;
    return n;
  }
  void signal_all(int sig) const {
    for (const Child& c : children_) {
      if (c.running) ::kill(c.pid, sig);
    }
  }
  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  bool relay_output();  // false once every stream closed and no rank runs (or the drain gave up)
  void forward_signals();
  void reap();
  void note_stop(int r, int status);
  int stopped_rank() const;
  void escalate();
  int exit_status() const;

  const Args& a_;
  const double grace_sec_;
  const double term_delay_sec_;
  std::vector<Child> children_;
  std::vector<Stream> streams_;
  int first_failed_ = -1;      // rank whose failure ends the job
  int frozen_ = -1;            // a rank found stopped when the first failure came: the one to blame
  int frozen_signal_ = 0;      // what stopped it
  int signal_received_ = 0;    // a signal fsdp-run got and forwarded
  bool sigterm_sent_ = false;  // after it, deaths are our doing, not failures
  // Deadlines; kNever when not armed (std::optional here trips g++ 12's -Wmaybe-uninitialized).
  static constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point term_at_ = kNever, kill_at_ = kNever, drain_until_ = kNever;
};

bool Job::start(const std::string& program, std::vector<std::vector<std::string>>& envs) {
  std::vector<std::string> argv_strings = a_.command;
  std::vector<char*> child_argv = c_array(argv_strings);
  // --bind-to core: the CPUs this process may use, in order; rank r gets the r-th (decided here: the
  // child between fork and exec only makes the system call).
  std::vector<int> cpus;
  if (a_.bind_to_core) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (::sched_getaffinity(0, sizeof(mine), &mine) != 0) {
      std::fprintf(stderr, "fsdp-run: --bind-to core: sched_getaffinity: %s\n", std::strerror(errno));
      return false;
    }
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mine)) cpus.push_back(c);
    }
    if (static_cast<int>(cpus.size()) < a_.nproc) {
      std::fprintf(stderr, "fsdp-run: --bind-to core: %d ranks but only %zu CPUs to bind them to (use --bind-to none)\n",
                   a_.nproc, cpus.size());
      return false;
    }
  }
  for (int r = 0; r < a_.nproc; ++r) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (a_.tag_output && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) {
      std::fprintf(stderr, "fsdp-run: pipe: %s\n", std::strerror(errno));
      return false;
    }
    std::vector<char*> child_env = c_array(envs[r]);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "fsdp-run: fork: %s\n", std::strerror(errno));
      g_signal = SIGTERM;  // stop what was started
      break;
    }
    if (pid == 0) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : kForwarded) ::sigaction(sig, &dfl, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      // Dies with fsdp-run, even if fsdp-run is SIGKILLed.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      if (a_.tag_output) {
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
      }
      if (!cpus.empty()) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[static_cast<size_t>(r)], &one);
        if (::sched_setaffinity(0, sizeof(one), &one) != 0) {
          const char msg[] = "fsdp-run: --bind-to core: sched_setaffinity failed\n";
          (void)!::write(2, msg, sizeof(msg) - 1);
          ::_exit(127);
        }
      }
      ::execve(program.c_str(), child_argv.data(), child_env.data());
      const char msg[] = "fsdp-run: exec failed\n";
      (void)!::write(2, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    children_[r] = {pid, true, 0};
    if (a_.tag_output) {
      ::close(out[1]);
      ::close(err[1]);
      const std::string prefix = "[rank " + std::to_string(r) + "] ";
      for (auto [fd, to] : {std::pair{out[0], 1}, std::pair{err[0], 2}}) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        streams_.push_back(Stream{fd, to, prefix, {}});
      }
    }
  }
  return true;
}

bool Job::relay_output() {
  std::vector<pollfd> fds;
  std::vector<Stream*> owners;
  for (Stream& s : streams_) {
    if (s.fd >= 0) {
      fds.push_back({s.fd, POLLIN, 0});
      owners.push_back(&s);
    }
  }
  if (fds.empty() && alive() == 0) return false;
  if (alive() == 0 && drain_until_ == kNever) drain_until_ = Clock::now() + std::chrono::seconds(1);
  if (Clock::now() > drain_until_) return false;  // a grandchild holds a pipe open: stop waiting
  const int ready = ::poll(fds.data(), fds.size(), 20);
  if (ready > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents) pump(*owners[i]);
    }
  } else if (fds.empty()) {
    ::usleep(20000);
  }
  return true;
}

void Job::forward_signals() {
  const int sig = g_signal;
  if (sig == 0) return;
  g_signal = 0;
  signal_received_ = sig;
  std::fprintf(stderr, "fsdp-run: got signal %d (SIG%s), forwarding it to %d running rank(s)\n", sig, sigabbrev_np(sig),
               alive());
  signal_all(sig);
  if (kill_at_ == kNever) kill_at_ = Clock::now() + seconds(grace_sec_);
}

// Until the others get SIGTERM, a rank killed by a signal replaces a rank that merely exited with an
// error as the culprit: a SIGKILLed process can take longer to become reapable than a survivor takes
// to notice the lost peer, report it and exit.
//
// A rank that is stopped (SIGSTOP, a debugger's group stop) when another fails is what the others
// were waiting on: it is named as the cause, not the survivor that gave up on it.
void Job::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (pid <= 0) return;
    for (int r = 0; r < a_.nproc; ++r) {
      if (children_[r].pid != pid || !children_[r].running) continue;
      if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
        note_stop(r, status);
        continue;
      }
      children_[r].running = false;
      children_[r].status = status;
      if (!failed(status) || signal_received_ || sigterm_sent_) continue;
      if (first_failed_ < 0) {
        first_failed_ = r;
        frozen_ = stopped_rank();
        if (frozen_ >= 0) frozen_signal_ = children_[frozen_].stop_signal;
        term_at_ = Clock::now() + seconds(term_delay_sec_);
        kill_at_ = term_at_ + seconds(grace_sec_);
        std::fprintf(stderr,
                     "fsdp-run: rank %d (pid %d) %s; stopping the other %d running rank(s) (SIGTERM in %.1f s, "
                     "SIGKILL %.1f s later)\n",
                     r, pid, describe_status(status).c_str(), alive(), term_delay_sec_, grace_sec_);
        if (frozen_ >= 0) {
          std::fprintf(stderr, "fsdp-run: rank %d (pid %d) is frozen (stopped by SIG%s): the others failed waiting on it\n",
                       frozen_, children_[frozen_].pid, sigabbrev_np(frozen_signal_));
        }
      } else {
        std::fprintf(stderr, "fsdp-run: rank %d (pid %d) %s\n", r, pid, describe_status(status).c_str());
        if (WIFSIGNALED(status) && !WIFSIGNALED(children_[first_failed_].status)) first_failed_ = r;
      }
    }
  }
}

void Job::note_stop(int r, int status) {
  Child& c = children_[r];
  if (WIFCONTINUED(status)) {
    c.stop_signal = 0;
    return;
  }
  c.stop_signal = WSTOPSIG(status);
  std::fprintf(stderr, "fsdp-run: rank %d (pid %d) was stopped by signal %d (SIG%s)\n", r, c.pid, c.stop_signal,
               sigabbrev_np(c.stop_signal));
}

int Job::stopped_rank() const {
  for (int r = 0; r < a_.nproc; ++r) {
    if (children_[r].running && children_[r].stop_signal != 0) return r;
  }
  return -1;
}

void Job::escalate() {
  const auto now = Clock::now();
  if (now >= term_at_) {
    signal_all(SIGTERM);
    // A stopped rank holds SIGTERM pending until it runs again.
    for (const Child& c : children_) {
      if (c.running && c.stop_signal != 0) ::kill(c.pid, SIGCONT);
    }
    sigterm_sent_ = true;
    term_at_ = kNever;
  }
  if (now >= kill_at_ && alive() > 0) {
    std::fprintf(stderr, "fsdp-run: %d rank(s) still running after the grace period: SIGKILL\n", alive());
    signal_all(SIGKILL);
    kill_at_ = kNever;
  }
}

int Job::exit_status() const {
  if (frozen_ >= 0) {
    std::fprintf(stderr, "fsdp-run: failed: rank %d froze (stopped by SIG%s); rank %d %s waiting on it\n", frozen_,
                 sigabbrev_np(frozen_signal_),
                 first_failed_, describe_status(children_[first_failed_].status).c_str());
    return exit_code_of(children_[first_failed_].status);
  }
  if (first_failed_ >= 0) {
    const int status = children_[first_failed_].status;
    std::fprintf(stderr, "fsdp-run: failed: rank %d %s\n", first_failed_, describe_status(status).c_str());
    return exit_code_of(status);
  }
  if (signal_received_) return 128 + signal_received_;
  return 0;
}

int Job::supervise() {
  while (relay_output()) {
    forward_signals();
    reap();
    escalate();
  }
  for (Stream& s : streams_) {
    if (s.fd >= 0) emit(s, true);
  }
  return exit_status();
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
    secret = fsdp::generate_job_secret();
  }
  ::setenv(std::string(fsdp::knobs::kJobSecret.env).c_str(), fsdp::to_hex(secret.key).c_str(), 1);
  ::unsetenv(std::string(fsdp::knobs::kJobSecretFile.env).c_str());
}

int main(int argc, char** argv) {
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

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);  // no SA_RESTART: poll() wakes up
  ::signal(SIGPIPE, SIG_IGN);

  Job job(a, grace_sec, term_delay_sec);
  if (!job.start(program, envs)) return 1;
  return job.supervise();
}
