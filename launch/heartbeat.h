// Liveness out of band, through the rendezvous store: every rank bumps its counter
// ("<prefix>heartbeat/<rank>") every timeout/4 and watches the next rank's. A counter that has not
// moved for `timeout` means that rank is frozen (SIGSTOP, a debugger, a hung host). The rank that sees
// it publishes "<prefix>frozen" (the first report wins), and every rank, reading that key on each beat,
// declares the frozen rank lost on its transport (Transport::declare_peer_lost): whatever waits on it
// fails with PeerLostError naming it within one beat, however long FSDP_TIMEOUT_SEC is.
//
//   Heartbeat beat(store_host, store_port, "fsdp/job/", rank, size, transport, std::chrono::seconds(20), 0);
//
// Costs three small store requests per rank per beat. A rank stuck in compute keeps beating (this
// thread is not stuck): the collective timeout is what catches it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace fsdp {
class Transport;
}

namespace fsdp::launch {

class StoreClient;

class Heartbeat {
 public:
  // Starts beating on its own thread and store connection. `store_rank`: the rank whose process serves
  // the store (its silence then means that rank froze), or -1 for an external store. `secret`: the
  // job secret its store connection proves (common/job_secret.h; empty: none).
  Heartbeat(std::string store_host, uint16_t store_port, std::string key_prefix, int rank, int size,
            std::shared_ptr<Transport> transport, std::chrono::milliseconds timeout, int store_rank,
            std::string secret);
  // Stops beating and joins the thread (at most one store call's bound, timeout/4).
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run();
  void beat(StoreClient& store);
  void declare(int peer, const std::string& why);

  const std::string host_;
  const uint16_t port_;
  const std::string prefix_;
  const int rank_, size_, store_rank_;
  const std::shared_ptr<Transport> transport_;
  const std::chrono::milliseconds timeout_, period_;
  const std::string secret_;

  // Thread state.
  int64_t watched_count_ = -1;
  std::chrono::steady_clock::time_point watched_since_, store_ok_at_;
  bool declared_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fsdp::launch
