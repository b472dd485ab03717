#include "launch/tools/fsdp_run_nodes.h"

#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "collectives/types/errors.h"
#include "common/knobs.h"
#include "launch/world.h"

namespace fsdp::launch::run {
namespace {

using namespace std::chrono_literals;

// How long one look of the watcher waits for the next report: how soon it notices a stop.
constexpr auto kWatchSlice = 200ms;
// How long a launcher tries to reach the store again once the job runs: node 0's fsdp-run is either
// there at once or gone (the first connect waits the rendezvous timeout: nodes start in any order).
constexpr auto kReconnect = 2s;

StoreClientOptions link_options(std::chrono::milliseconds connect_timeout) {
  StoreClientOptions o;  // the job secret from FSDP_JOB_SECRET, which fsdp-run has settled
  o.connect_timeout = connect_timeout;
  o.timeout = 10s;
  return o;
}

}  // namespace

NodeLink::NodeLink(const Args& a, const std::string& store_host, uint16_t store_port, int attempt)
    : a_(a),
      prefix_("fsdp-run/" + knobs::kRunId.get() + "/" + attempt_key_prefix(attempt)),
      where_(store_host + ":" + std::to_string(store_port)),
      reporter_(store_host, store_port, link_options(rendezvous_timeout_from_env())),
      watch_options_(link_options(kReconnect)) {
  watcher_ = std::thread([this, store_host, store_port] {
    try {
      StoreClient client(store_host, store_port, watch_options_);
      for (int i = 1; !stop_;) {
        std::string value;
        try {
          value = client.get(prefix_ + "failed/" + std::to_string(i), kWatchSlice);
        } catch (const CommError& e) {
          // No (re)connection within kReconnect, or the secret refused: the store is gone for us.
          if (e.context().op == "store_connect") throw;
          continue;  // no report yet (TimeoutError), or the connection broke: the next look reconnects
        }
        ++i;
        NodeFailure f;
        std::istringstream in(value);
        std::string signal_death;
        in >> f.node >> f.exit_code >> signal_death;
        std::getline(in >> std::ws, f.what);
        f.signal_death = signal_death == "1";
        if (f.node == a_.node_rank) continue;  // our own report
        std::lock_guard<std::mutex> lock(mu_);
        pending_.push_back(f);
      }
    } catch (const std::exception& e) {
      // The store (node 0's fsdp-run) is gone or unreachable while our ranks still run.
      if (stop_) return;
      store_lost_ = true;
      const auto* comm = dynamic_cast<const CommError*>(&e);
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(NodeFailure{0, 1, false,
                                     "node 0's fsdp-run is gone: its store at " + where_ + " no longer answers (" +
                                         (comm ? comm->detail() : std::string(e.what())) + ")"});
    }
  });
}

NodeLink::~NodeLink() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void NodeLink::report(int exit_code, bool signal_death, const std::string& what) {
  if (store_lost_) return;
  try {
    reporter_.set_reconnect_deadline(std::chrono::steady_clock::now() + kReconnect);
    const int64_t i = reporter_.add(prefix_ + "failed", 1);
    reporter_.set(prefix_ + "failed/" + std::to_string(i), std::to_string(a_.node_rank) + "\t" +
                                                               std::to_string(exit_code) + "\t" +
                                                               (signal_death ? "1" : "0") + "\t" + what);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: node %d: cannot tell the other nodes: %s\n", a_.node_rank, e.what());
  }
}

bool NodeLink::next(NodeFailure* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.empty()) return false;
  *out = pending_.front();
  pending_.pop_front();
  return true;
}

Outcome NodeLink::agree(const Outcome& mine) {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
  Outcome job = mine;
  std::vector<Outcome> all(static_cast<size_t>(a_.nnodes));
  try {
    if (store_lost_) throw std::runtime_error("node 0's store no longer answers");
    reporter_.set_reconnect_deadline(std::chrono::steady_clock::now() + kReconnect);
    reporter_.set(prefix_ + "outcome/" + std::to_string(a_.node_rank),
                  std::to_string(mine.status) + "\t" + (mine.rank_failed ? "1" : "0") + "\t" +
                      std::to_string(a_.max_restarts) + "\t" + mine.what);
    std::vector<std::string> keys;
    for (int n = 0; n < a_.nnodes; ++n) keys.push_back(prefix_ + "outcome/" + std::to_string(n));
    reporter_.wait(keys, rendezvous_timeout_from_env());
    for (int n = 0; n < a_.nnodes; ++n) {
      std::istringstream in(reporter_.get(keys[static_cast<size_t>(n)], kReconnect));
      std::string failed;
      int max_restarts = 0;
      Outcome& o = all[static_cast<size_t>(n)];
      in >> o.status >> failed >> max_restarts;
      std::getline(in >> std::ws, o.what);
      o.rank_failed = failed == "1";
      if (max_restarts != a_.max_restarts) {  // each launcher would decide otherwise
        throw std::runtime_error("node " + std::to_string(n) + " runs with --max-restarts " +
                                 std::to_string(max_restarts) + ", this one with " + std::to_string(a_.max_restarts) +
                                 ": give every node the same");
      }
    }
  } catch (const std::exception& e) {
    job.rank_failed = false;
    job.status = mine.status != 0 ? mine.status : 1;
    job.what = (mine.what.empty() ? "" : mine.what + "; ") + "node " + std::to_string(a_.node_rank) +
               " cannot agree with the other nodes on a restart: " + e.what();
    return job;
  }
  for (int n = 0; n < a_.nnodes; ++n) {  // a node's fsdp-run was signalled: the job ends, no restart
    const Outcome& o = all[static_cast<size_t>(n)];
    if (o.status == 0 || o.rank_failed) continue;
    if (mine.status != 0) return Outcome{mine.status, false, mine.what};
    return Outcome{o.status, false,
                   o.what.empty() ? "node " + std::to_string(n) + "'s fsdp-run was stopped by a signal" : o.what};
  }
  if (mine.rank_failed) return mine;
  for (int n = 0; n < a_.nnodes; ++n) {
    const Outcome& o = all[static_cast<size_t>(n)];
    if (o.rank_failed) return Outcome{o.status, true, o.what + " (node " + std::to_string(n) + ")"};
  }
  return mine;
}

void NodeLink::finish() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
  if (store_lost_) return;
  try {
    reporter_.set_reconnect_deadline(std::chrono::steady_clock::now() + kReconnect);
    if (reporter_.add(prefix_ + "nodes_done", 1) == a_.nnodes) reporter_.set(prefix_ + "nodes_done/all", "1");
    if (a_.node_rank == 0) reporter_.wait({prefix_ + "nodes_done/all"}, rendezvous_timeout_from_env());
  } catch (const std::exception& e) {
    if (a_.node_rank == 0) {
      std::fprintf(stderr, "fsdp-run: node 0: not every node reported its ranks done; stopping the store: %s\n",
                   e.what());
    }
  }
}

}  // namespace fsdp::launch::run
