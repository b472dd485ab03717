// The rendezvous key-value store: one process (rank 0's launcher, say) runs a StoreServer; every rank
// opens a StoreClient to it and trades the addresses and counters that bootstrap communicators.
//
//   fsdp::launch::StoreServer server("10.0.0.7");              // port 0: the kernel picks one
//   fsdp::launch::StoreClient store("10.0.0.7", server.port());
//   store.set("rank3", listener.address());
//   std::string peer = store.get("rank4");                     // waits until rank 4 has set it
//
// Wire format: every connection first passes the job-secret handshake below; then frames of a 4-byte
// little-endian length and a serialized fsdp.proto.StoreRequest or StoreResponse (proto/store.proto,
// which also documents each op's semantics). Boost.Asio does the
// networking, hidden behind the pimpls so including this header costs nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_secret.h"
#include "launch/key_value_store.h"
#include "launch/store_frame.h"  // kStoreMaxFrameBytes

namespace fsdp::launch {

// Every connection opens with a challenge-response on the job secret (common/job_secret.h), so only
// processes holding the secret read or write keys, and the secret never crosses the wire:
//   server -> client  kStoreAuthMagic (8 bytes), the server's nonce (kAuthNonceBytes)
//   client -> server  the client's nonce, auth_proof(secret, kStoreClientLabel, server nonce + client nonce)
//   server -> client  auth_proof(secret, kStoreServerLabel, server nonce + client nonce)
// A client whose proof is wrong is closed and logged (rate-limited) before any request of its is read;
// a server whose proof is wrong is refused by the client (mutual: a squatter on the port learns nothing
// and serves no one). With no secret on either side the proofs use the empty key.
inline constexpr std::string_view kStoreAuthMagic = "fsdpsto1";
inline constexpr std::string_view kStoreClientLabel = "fsdp-store client";
inline constexpr std::string_view kStoreServerLabel = "fsdp-store server";

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

struct StoreClientOptions {
  // How long the constructor (and a reconnect after a broken connection) keeps retrying, with
  // exponential backoff, before throwing TimeoutError: the server may start after its clients.
  std::chrono::milliseconds connect_timeout{30000};
  // Bound on every call. get() and wait() without their own timeout wait this long for keys; with
  // one, the server answers after that timeout and the client allows this much more for the reply.
  std::chrono::milliseconds timeout{30000};
  // The job secret this client proves and expects the server to prove (raw bytes; empty: the empty
  // key). FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE.
  std::string secret = job_secret_from_env().key;
};

// A blocking client. Each call sends one request and waits for its answer; calls from several threads
// are serialized (use one client per thread for parallelism). Errors: TimeoutError when a call or the
// keys it waits for ran past its timeout (naming the keys or host:port), CommError when the connection
// broke (the next call reconnects) or the handshake failed (the two sides hold different job
// secrets), InvalidArgument when the server rejected the request.
class StoreClient : public KeyValueStore {
 public:
  StoreClient(std::string host, uint16_t port, StoreClientOptions options = {});
  ~StoreClient() override;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value) override;
  // The key's value; while it is missing, waits like wait() up to the timeout.
  std::string get(const std::string& key) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  // Returns once every key exists; TimeoutError naming the missing ones after the timeout.
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  // Adds delta to the counter at key (missing: 0) and returns the new value. The counter is stored as
  // decimal text, so get() returns e.g. "42"; InvalidArgument if the key holds anything else.
  int64_t add(const std::string& key, int64_t delta) override;
  // Sets key to desired if its current value equals expected (a missing key equals ""); returns the
  // value after the call, so the swap happened exactly when the result equals desired.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  // Removes key; true if it existed. ("delete" is a keyword.)
  bool erase(const std::string& key) override;
  int64_t num_keys();

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  std::string describe() const override { return "the store " + host_ + ":" + std::to_string(port_); }

 private:
  class Impl;
  std::string host_;
  uint16_t port_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::launch
