// A client of PyTorch's c10d TCPStore: under torchrun the agent already serves one on
// MASTER_ADDR:MASTER_PORT, and torch's own worker processes join it as clients rather than serving a
// second store there. connect_world does the same through this client (torchrun_store.h).
//
// The wire, as torch's TCPStore.cpp / TCPStoreBackend.cpp speak it: one command byte, then strings as
// a u64 little-endian length and bytes; waits answer one byte, counters an i64. Two dialects:
//   legacy    (torch <= 2.0, Debian's 1.13 among them): no handshake; SET 0, COMPARE_SET 1, GET 2,
//             ADD 3, CHECK 4, WAIT 5, GETNUMKEYS 6, WATCH_KEY 7, DELETE_KEY 8;
//   validated (torch >= 2.1): the first command must be VALIDATE (0) with the magic 0x3C85F7CE, and
//             every later code is one higher (SET 1 .. GETNUMKEYS 7).
// The client tells them apart without harming either server: it first asks GETNUMKEYS in the legacy
// dialect, which a legacy server answers at once and a validated one refuses (closes, or ignores);
// the reverse order would make a legacy server read the magic as a 1 GB key length and stall.
// Keys carry torch's own "/" prefix, so torch's clients of the same store see the names we set.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "launch/key_value_store.h"

namespace fsdp::launch {

// torch's servers (TCPStore, HashStore) answer a compare_set on a missing key with a non-empty
// `expected` by returning `expected`, as if the key held it; KeyValueStore says "" (the key's state).
// Told apart whenever expected != desired: a key that held `expected` would now hold `desired`.
std::string from_torch_compare_set(std::string reply, const std::string& expected, const std::string& desired);

class TorchStoreClient : public KeyValueStore {
 public:
  enum class Dialect { kLegacy, kValidated };

  // Connects (retrying until `timeout`) and finds the dialect; `timeout` also bounds every call.
  // `key_namespace` goes before every key (as torch's PrefixStore would put it). TimeoutError when
  // nothing answers in time, CommError when the server speaks neither dialect.
  TorchStoreClient(std::string host, uint16_t port, std::chrono::milliseconds timeout, std::string key_namespace = "");
  ~TorchStoreClient() override;
  TorchStoreClient(const TorchStoreClient&) = delete;
  TorchStoreClient& operator=(const TorchStoreClient&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  // COMPARE_SET in either dialect; torch's answer for a missing key goes through
  // from_torch_compare_set, so the result means what KeyValueStore::compare_set says.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  // Legacy servers delete the key. Validated ones are not asked (DELETE_KEY's code moved between 2.x
  // releases, and a wrong code would desynchronize the connection): false, the key stays until the
  // agent's store goes with the agent.
  bool erase(const std::string& key) override;
  std::string describe() const override;

  Dialect dialect() const { return dialect_; }

 private:
  void connect_or_throw();
  void send_command(int legacy_code, const std::string& body);
  void wait_locked(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  void drop_connection();
  std::string wire_key(const std::string& key) const { return "/" + namespace_ + key; }  // "/": torch's keyPrefix_

  const std::string host_;
  const uint16_t port_;
  const std::chrono::milliseconds timeout_;
  const std::string namespace_;
  Dialect dialect_ = Dialect::kLegacy;
  std::mutex mu_;  // one request in flight per connection
  int fd_ = -1;    // -1: reconnect before the next call (after a timed-out wait, say)
};

}  // namespace fsdp::launch
