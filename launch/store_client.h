// The rendezvous store's blocking client (store.h tells the whole story).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/job_secret.h"
#include "launch/key_value_store.h"
#include "launch/store_frame.h"  // the handshake's labels, kStoreMaxFrameBytes

namespace fsdp::launch {

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
  // The job rank this client serves, named in its errors ("rank 3, op get, ..."); -1 for a launcher.
  int rank = -1;
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
  // KeyValueStore::compare_set: the swap happened exactly when the result equals desired.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  // KeyValueStore::vote in one round trip (OP_VOTE); a server that does not know the op, or its
  // snapshot key (an older fsdp-store), refuses it uncounted, and the vote then takes KeyValueStore's
  // round trips.
  std::string vote(const std::string& counter, const std::string& decision, int64_t target, const std::string& value,
                   const std::string& snapshot, std::chrono::milliseconds timeout) override;
  // Removes key; true if it existed. ("delete" is a keyword.)
  bool erase(const std::string& key) override;
  int64_t num_keys();

  // Until cleared (time_point::max()), no reconnect retries past `deadline`: a start-up bounded by one
  // rendezvous timeout must not spend another on a store that went away (connect_world sets it).
  void set_reconnect_deadline(std::chrono::steady_clock::time_point deadline);

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
