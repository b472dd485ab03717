// The rendezvous store's server (store.h tells the whole story): one thread of Asio callbacks serving
// every client, bounded against misbehaving ones.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/job_secret.h"
#include "launch/store_frame.h"  // the handshake's labels, kStoreMaxFrameBytes

namespace fsdp::launch {

// What a store server tolerates from its clients, so a few misbehaving connections cannot stall or
// exhaust it (docs/launch.md, "The store under abuse").
struct StoreServerOptions {
  // Connections held at once; capped by RLIMIT_NOFILE less a reserve. At the limit the connection idle
  // longest is closed; with none idle, accepting pauses until one closes. FSDP_STORE_MAX_CONNECTIONS.
  size_t max_connections = 1024;
  // A connection with no request in flight for this long is closed. FSDP_STORE_IDLE_TIMEOUT_SEC.
  std::chrono::milliseconds idle_timeout{300000};
  // Once a length prefix arrived, the body must follow within this; a reply must be taken within it.
  // FSDP_STORE_IO_TIMEOUT_SEC.
  std::chrono::milliseconds io_timeout{10000};
  // The job secret clients must prove (raw bytes; empty: the empty key, no authentication).
  // FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE.
  std::string secret = job_secret_from_env().key;

  static StoreServerOptions from_env();
};

// Serves the store on its own thread from construction until destruction. Any number of clients may
// be connected at once; a GET or WAIT for missing keys parks only that client's connection, never
// the server, and a parked client that hangs up is noticed and freed at once. A connection that sends
// an oversized or unparsable frame is closed; others carry on. A frame's memory grows as its bytes
// arrive, never ahead of them from the announced length.
class StoreServer {
 public:
  // Binds host:port (port 0: the kernel picks a free one; see port()) and starts serving. Throws
  // CommError when the address cannot be resolved, is not local, or the port is taken.
  explicit StoreServer(const std::string& host = "127.0.0.1", uint16_t port = 0,
                       StoreServerOptions options = StoreServerOptions::from_env());
  // Closes every connection (parked clients see their connection drop) and joins the thread.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  const std::string& host() const;
  uint16_t port() const;        // the bound port, the kernel's choice when 0 was asked for
  std::string address() const;  // "host:port", what a launcher hands its ranks

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::launch
