#include "launch/tools/fsdp_run_nodes.h"

#include <chrono>
#include <cstdio>
#include <sstream>

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

NodeLink::NodeLink(const Args& a, const std::string& store_host, uint16_t store_port)
    : a_(a),
      prefix_("fsdp-run/" + knobs::kRunId.get() + "/"),
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
