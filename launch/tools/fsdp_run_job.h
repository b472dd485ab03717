// fsdp-run's supervision of the ranks it starts: fork and exec with each rank's environment (and CPU,
// with --bind-to core), relay their tagged output, forward the signals fsdp-run gets, and when one
// rank fails give the others a moment, then SIGTERM, then SIGKILL; name the rank to blame (a frozen
// one before the survivor that gave up waiting on it) and exit with its status.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launch/tools/fsdp_run_args.h"
#include "launch/tools/fsdp_run_ft.h"
#include "launch/tools/fsdp_run_nodes.h"
#include "launch/tools/fsdp_run_output.h"

namespace fsdp::launch::run {

using Clock = std::chrono::steady_clock;

// Catches SIGINT, SIGTERM and SIGHUP for Job::supervise to forward to the ranks (without SA_RESTART,
// so its poll() wakes up) and ignores SIGPIPE. Before Job::start: the children reset them.
void catch_signals();

struct Child {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int stop_signal = 0;  // the signal that stopped it (SIGSTOP, SIGTSTP...) while stopped, else 0
};

// The ranks of one job: started together, their output tagged, the first failure ending the rest.
class Job {
 public:
  Job(const Args& a, double grace_sec, double term_delay_sec)
      : a_(a),
        grace_sec_(grace_sec),
        term_delay_sec_(term_delay_sec),
        children_(a.nproc),
        ft_killed_(a.nproc, 0),
        awaiting_(a.nproc, 0) {}

  // Forks every rank; false when a pipe could not be made (nothing more is started then).
  bool start(const std::string& program, std::vector<std::vector<std::string>>& envs);
  // Across nodes (--nnodes): report this node's first failure through `link` and stop this node's
  // ranks when another node reports one.
  void link(NodeLink* link) { link_ = link; }
  // Single node, the store served here: once the ranks enabled fault tolerance a rank's end is
  // recorded for the survivors rather than ending the job, and the job is judged by the latest
  // decision (fsdp_run_ft.h).
  void fault_tolerance(FaultToleranceLink* ft) { ft_ = ft; }
  // Relays output, forwards signals and reaps ranks until all ended; returns how the job ended.
  Outcome supervise();

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
  // Forks child r (again, for a replacement: `joining` adds FSDP_FT_JOIN=1); false when a pipe failed.
  bool spawn(int r, bool joining);
  void replace_lost();
  bool relay_output();  // false once every stream closed and no rank runs (or the drain gave up)
  void forward_signals();
  void reap();
  void note_stop(int r, int status);
  int stopped_rank() const;
  void escalate();
  void hear_other_nodes();
  void stop_others_soon();
  Outcome outcome() const;
  void note_ft_exit(int r);
  void kill_stopped_at_end();
  void judge_by_decision(Outcome* o);
  int rank_of(int r) const { return a_.first_rank() + r; }  // the job rank of this node's r-th child

  const Args& a_;
  const double grace_sec_;
  const double term_delay_sec_;
  std::vector<Child> children_;
  std::vector<Stream> streams_;
  int first_failed_ = -1;      // rank whose failure ends the job
  int frozen_ = -1;            // a rank found stopped when the first failure came: the one to blame
  int frozen_signal_ = 0;      // what stopped it
  NodeLink* link_ = nullptr;   // --nnodes > 1
  bool remote_blamed_ = false;  // a rank of another node failed first (or was killed by a signal)
  NodeFailure remote_;
  int signal_received_ = 0;    // a signal fsdp-run got and forwarded
  bool sigterm_sent_ = false;  // after it, deaths are our doing, not failures
  FaultToleranceLink* ft_ = nullptr;
  bool ft_on_ = false;           // the ranks enabled fault tolerance: exits are recorded, not fatal
  std::vector<int> ft_failed_;   // ranks (children) that failed in FT mode, in order
  std::vector<char> ft_killed_;  // stopped ranks killed here once every other rank had ended
  std::vector<char> awaiting_;   // --replace-lost: failed ranks to start again once the job went on without them
  int replaced_ = 0;             // replacements started
  std::string program_;          // what start() ran, for replacements
  std::vector<std::vector<std::string>>* envs_ = nullptr;
  std::vector<int> cpus_;  // --bind-to core
  bool fork_failed_ = false;
  // Deadlines; kNever when not armed (std::optional here trips g++ 12's -Wmaybe-uninitialized).
  static constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point term_at_ = kNever, kill_at_ = kNever, drain_until_ = kNever;
};

}  // namespace fsdp::launch::run
