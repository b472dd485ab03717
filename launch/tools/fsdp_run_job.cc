#include "launch/tools/fsdp_run_job.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace fsdp::launch::run {
namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

std::string signal_name(int sig) {
  const char* name = sigabbrev_np(sig);
  return name ? name : "?";
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (SIG" + signal_name(sig) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

std::vector<char*> c_array(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (auto& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

void catch_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);  // no SA_RESTART: poll() wakes up
  ::signal(SIGPIPE, SIG_IGN);
}

bool Job::start(const std::string& program, std::vector<std::vector<std::string>>& envs) {
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
      std::fprintf(stderr,
                   "fsdp-run: --bind-to core: %d ranks but only %zu CPUs to bind them to (use --bind-to none)\n",
                   a_.nproc, cpus.size());
      return false;
    }
  }
  program_ = program;
  envs_ = &envs;
  cpus_ = std::move(cpus);
  for (int r = 0; r < a_.nproc && !fork_failed_; ++r) {
    if (!spawn(r, false)) return false;
  }
  return true;
}

bool Job::spawn(int r, bool joining) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (a_.tag_output && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) {
    std::fprintf(stderr, "fsdp-run: pipe: %s\n", std::strerror(errno));
    return false;
  }
  std::vector<std::string> env = envs_->at(static_cast<size_t>(r));
  if (joining) env.push_back("FSDP_FT_JOIN=1");
  std::vector<char*> child_env = c_array(env);
  std::vector<std::string> argv_strings = a_.command;
  std::vector<char*> child_argv = c_array(argv_strings);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "fsdp-run: fork: %s\n", std::strerror(errno));
    g_signal = SIGTERM;  // stop what was started
    fork_failed_ = true;
    return true;
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
    if (!cpus_.empty()) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus_[static_cast<size_t>(r)], &one);
      if (::sched_setaffinity(0, sizeof(one), &one) != 0) {
        const char msg[] = "fsdp-run: --bind-to core: sched_setaffinity failed\n";
        (void)!::write(2, msg, sizeof(msg) - 1);
        ::_exit(127);
      }
    }
    ::execve(program_.c_str(), child_argv.data(), child_env.data());
    const char msg[] = "fsdp-run: exec failed\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  children_[r] = {pid, true, 0};
  if (a_.tag_output) {
    ::close(out[1]);
    ::close(err[1]);
    const std::string prefix = "[rank " + std::to_string(rank_of(r)) + "] ";
    for (auto [fd, to] : {std::pair{out[0], 1}, std::pair{err[0], 2}}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      streams_.push_back(Stream{fd, to, prefix, {}});
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
      // Fault-tolerance mode, unless fail-fast already began (a rank failed before the key was written).
      const bool stopping = signal_received_ || sigterm_sent_ || term_at_ != kNever;
      if (ft_ && !stopping && (ft_on_ || (ft_on_ = ft_->enabled()))) {
        note_ft_exit(r);
        continue;
      }
      if (!failed(status) || signal_received_ || sigterm_sent_) continue;
      const bool blamed = first_failed_ < 0 || (WIFSIGNALED(status) && !WIFSIGNALED(children_[first_failed_].status));
      if (first_failed_ < 0) {
        first_failed_ = r;
        frozen_ = stopped_rank();
        if (frozen_ >= 0) frozen_signal_ = children_[frozen_].stop_signal;
        stop_others_soon();
        std::fprintf(stderr,
                     "fsdp-run: rank %d (pid %d) %s; stopping the other %d running rank(s) (SIGTERM in %.1f s, "
                     "SIGKILL %.1f s later)\n",
                     rank_of(r), pid, describe_status(status).c_str(), alive(), term_delay_sec_, grace_sec_);
        if (frozen_ >= 0) {
          std::fprintf(stderr,
                       "fsdp-run: rank %d (pid %d) is frozen (stopped by SIG%s): the others failed waiting on it\n",
                       rank_of(frozen_), children_[frozen_].pid, sigabbrev_np(frozen_signal_));
        }
      } else {
        std::fprintf(stderr, "fsdp-run: rank %d (pid %d) %s\n", rank_of(r), pid, describe_status(status).c_str());
        if (blamed) first_failed_ = r;
      }
      // A killed rank here outranks a report of a rank that merely exited with an error.
      if (blamed && WIFSIGNALED(status) && !(remote_blamed_ && remote_.signal_death)) remote_blamed_ = false;
      if (blamed && link_) {
        link_->report(exit_code_of(status), WIFSIGNALED(status),
                      "rank " + std::to_string(rank_of(r)) + " " + describe_status(status));
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
  std::fprintf(stderr, "fsdp-run: rank %d (pid %d) was stopped by signal %d (SIG%s)\n", rank_of(r), c.pid,
               c.stop_signal, sigabbrev_np(c.stop_signal));
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

Outcome Job::outcome() const {
  Outcome o;
  o.rank_failed = signal_received_ == 0;
  if (frozen_ >= 0) {
    o.what = "rank " + std::to_string(rank_of(frozen_)) + " froze (stopped by SIG" + signal_name(frozen_signal_) +
             "); rank " + std::to_string(rank_of(first_failed_)) + " " +
             describe_status(children_[first_failed_].status) + " waiting on it";
    o.status = exit_code_of(children_[first_failed_].status);
  } else if (remote_blamed_) {
    o.what = remote_.what + " on node " + std::to_string(remote_.node);
    o.status = remote_.exit_code;
  } else if (first_failed_ >= 0) {
    const int status = children_[first_failed_].status;
    o.what = "rank " + std::to_string(rank_of(first_failed_)) + " " + describe_status(status);
    o.status = exit_code_of(status);
  } else {
    o.rank_failed = false;
    if (signal_received_) o.status = 128 + signal_received_;
  }
  return o;
}

void Job::stop_others_soon() {
  if (term_at_ != kNever || sigterm_sent_) return;
  term_at_ = Clock::now() + seconds(term_delay_sec_);
  kill_at_ = term_at_ + seconds(grace_sec_);
}

// A failure another node reported is this node's too: its ranks are stopped as after a local one.
// Blame goes to the first failure heard of, here or there, except that a rank killed by a signal
// outranks one that merely exited with an error (it is what the others lost).
void Job::hear_other_nodes() {
  NodeFailure f;
  while (link_ && link_->next(&f)) {
    if (signal_received_ || sigterm_sent_) continue;
    const bool blamed_signal =
        remote_blamed_ ? remote_.signal_death : first_failed_ >= 0 && WIFSIGNALED(children_[first_failed_].status);
    const bool nothing_blamed = !remote_blamed_ && first_failed_ < 0;
    if (nothing_blamed || (f.signal_death && !blamed_signal)) {
      remote_ = f;
      remote_blamed_ = true;
    }
    std::fprintf(stderr, "fsdp-run: node %d: %s; stopping this node's %d running rank(s)\n", f.node, f.what.c_str(),
                 alive());
    stop_others_soon();
  }
}

// Fault-tolerance mode: the survivors go on, so a rank's end stops nobody; it is recorded for their
// agreement. The first failure is still remembered for the end, in case no decision was ever made.
void Job::note_ft_exit(int r) {
  const int status = children_[r].status;
  ft_->record_exit(rank_of(r), describe_status(status));
  if (!failed(status)) return;
  ft_failed_.push_back(r);
  if (replaced_ < a_.replace_lost) awaiting_[static_cast<size_t>(r)] = 1;
  if (first_failed_ < 0 || (WIFSIGNALED(status) && !WIFSIGNALED(children_[first_failed_].status))) first_failed_ = r;
  if (ft_killed_[r]) return;  // said when it was killed
  std::fprintf(stderr, "fsdp-run: rank %d %s; the job goes on without it (fault_tolerance)\n", rank_of(r),
               describe_status(status).c_str());
}

// Fault-tolerance mode: a frozen rank the survivors left behind would hold fsdp-run forever. Once every
// rank still there is stopped, they are killed (a member of the last decision among them is then
// blamed for it at the end).
void Job::kill_stopped_at_end() {
  if (!ft_on_ || alive() == 0) return;
  for (const Child& c : children_) {
    if (c.running && c.stop_signal == 0) return;
  }
  for (int r = 0; r < a_.nproc; ++r) {
    if (!children_[r].running || ft_killed_[r]) continue;
    ft_killed_[r] = 1;
    std::fprintf(stderr,
                 "fsdp-run: rank %d (pid %d) is still stopped (SIG%s) and every other rank has ended: SIGKILL "
                 "(fault_tolerance)\n",
                 rank_of(r), children_[r].pid, sigabbrev_np(children_[r].stop_signal));
    ::kill(children_[r].pid, SIGKILL);
  }
}

// Fault-tolerance mode with a decision recorded: the job succeeded iff every rank of the latest
// decision exited 0; the ranks it left out are reported, not blamed. No decision: judged as always.
void Job::judge_by_decision(Outcome* o) {
  RecoveryDecision d;
  if (!ft_on_ || signal_received_ || !ft_->decision(&d)) return;
  std::string left_out;
  for (int r = 0; r < a_.nproc; ++r) {
    if (std::find(d.launch_ranks.begin(), d.launch_ranks.end(), rank_of(r)) == d.launch_ranks.end()) {
      left_out += (left_out.empty() ? "" : ", ") + std::to_string(rank_of(r));
    }
  }
  std::fprintf(stderr, "fsdp-run: fault_tolerance: the last decision (%s) went on without rank(s) %s\n",
               encode_decision(d).c_str(), left_out.empty() ? "none" : left_out.c_str());
  *o = Outcome{};
  for (int r : ft_failed_) {
    if (std::find(d.launch_ranks.begin(), d.launch_ranks.end(), rank_of(r)) == d.launch_ranks.end()) continue;
    if (!ft_->exit_recorded(rank_of(r))) continue;  // a newcomer started elsewhere replaced it (and cleared it)
    o->rank_failed = true;
    o->what = "rank " + std::to_string(rank_of(r)) + " " + describe_status(children_[r].status) +
              " (a survivor of epoch " + std::to_string(d.epoch) + ")";
    o->status = exit_code_of(children_[r].status);
    return;
  }
}

// --replace-lost: a rank that failed in fault-tolerance mode is started again, with the same RANK and
// FSDP_FT_JOIN=1, once the survivors' latest decision went on without it (so no agreement still reads its
// exited key, which is cleared for the newcomer) and while a member of that decision still runs. The
// newcomer joins the job at a step boundary (launch/grow_agreement.h).
void Job::replace_lost() {
  if (!ft_on_ || signal_received_ || std::find(awaiting_.begin(), awaiting_.end(), 1) == awaiting_.end()) return;
  RecoveryDecision d;
  if (!ft_->decision(&d)) return;
  bool member_running = false;
  for (int r = 0; r < a_.nproc; ++r) {
    const bool member = std::find(d.launch_ranks.begin(), d.launch_ranks.end(), rank_of(r)) != d.launch_ranks.end();
    member_running = member_running || (member && children_[r].running);
  }
  for (int r = 0; r < a_.nproc && member_running; ++r) {
    const auto i = static_cast<size_t>(r);
    if (!awaiting_[i] || std::find(d.launch_ranks.begin(), d.launch_ranks.end(), rank_of(r)) != d.launch_ranks.end()) {
      continue;
    }
    if (replaced_ >= a_.replace_lost || !ft_->clear_exit(rank_of(r))) continue;
    awaiting_[i] = 0;
    ++replaced_;
    std::erase(ft_failed_, r);  // the newcomer is judged, not the process it replaces
    std::fprintf(stderr, "fsdp-run: replacing lost rank %d (%d of --replace-lost %d): it joins the running job\n",
                 rank_of(r), replaced_, a_.replace_lost);
    if (!spawn(r, true)) awaiting_[i] = 1;
  }
}

Outcome Job::supervise() {
  while (relay_output()) {
    forward_signals();
    reap();
    replace_lost();
    hear_other_nodes();
    escalate();
    kill_stopped_at_end();
  }
  for (Stream& s : streams_) {
    if (s.fd < 0) continue;
    emit(s, true);
    ::close(s.fd);  // a grandchild holds it open: a restarted job must not inherit the descriptor
    s.fd = -1;
  }
  Outcome o = outcome();
  judge_by_decision(&o);
  return o;
}

}  // namespace fsdp::launch::run
