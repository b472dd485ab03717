// fsdp-run across nodes: the launchers of one job (--nnodes M) tell each other about failures through
// the store node 0's fsdp-run serves, so a rank failing on any node stops every node, and every
// launcher exits non-zero naming that rank, as one fsdp-run does on one host.
//
// Keys under "fsdp-run/<FSDP_RUN_ID>/" (start k > 0 of a job under --max-restarts: ".../attempt<k>/", so no
// launcher reads a report of an earlier start): "failed" counts failure reports, "failed/<i>" holds the i-th
// ("<node>\t<exit code>\t<signal death 0|1>\t<rank ...>"), read in order by every launcher's watcher;
// "nodes_done" counts launchers whose ranks all ended, and node 0's waits for all M before it stops
// serving, so the store outlives every rank of every node. Under --max-restarts, "outcome/<node>" holds
// how each node's start ended; every launcher reads all of them and so takes the same decision.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "launch/store_client.h"
#include "launch/tools/fsdp_run_args.h"

namespace fsdp::launch::run {

// How one start of the job ended (on this node, or agreed by every node): fsdp-run's exit status, and
// what to name ("rank 1 was killed by signal 9 (SIGKILL)").
struct Outcome {
  int status = 0;
  bool rank_failed = false;  // a rank failed (not a signal fsdp-run forwarded): a restart may help
  std::string what;          // empty when every rank succeeded or fsdp-run was signalled
};

// A failure on another node, as its launcher reported it; node -1: node 0's store went away.
struct NodeFailure {
  int node = -1;
  int exit_code = 1;
  bool signal_death = false;
  std::string what;  // "rank 3 was killed by signal 9 (SIGKILL)"
};

class NodeLink {
 public:
  // Connects to node 0's store (within FSDP_RENDEZVOUS_TIMEOUT_SEC) and starts watching for reports.
  // Throws what StoreClient throws when the store cannot be reached.
  // `attempt`: which start of the job (FSDP_RESTART_COUNT) this link reports for.
  NodeLink(const Args& a, const std::string& store_host, uint16_t store_port, int attempt);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  // This node's rank failed: every other launcher hears of it.
  void report(int exit_code, bool signal_death, const std::string& what);
  // The next failure another node reported since the last call; false when none.
  bool next(NodeFailure* out);
  // This node's ranks all ended with `mine`: publish it, wait (at most the rendezvous timeout) for every
  // node's, and return the job's: the first failure of a rank in node order (this node's own when it has
  // one, else another's with " (node N)"), or a node's signal (rank_failed false: no restart), else 0.
  // The store lost or a node silent: this node's outcome with rank_failed false, saying why.
  Outcome agree(const Outcome& mine);
  // This node's ranks all ended: stop watching, count this node done; node 0 then waits (at most the
  // rendezvous timeout) until every node is, so no node's rank loses the store early.
  void finish();

 private:
  void watch();

  const Args& a_;
  std::string prefix_;
  std::string where_;
  StoreClient reporter_;  // report() and finish(), on the supervising thread
  StoreClientOptions watch_options_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> store_lost_{false};  // the watcher could not reach the store: tell no one, wait for no one
  std::mutex mu_;
  std::deque<NodeFailure> pending_;
  std::thread watcher_;
};

}  // namespace fsdp::launch::run
