// The two adapters between torch's c10d::Store and the launch layer's store, one per direction:
//   as_key_value_store  torch's store as the launch layer's KeyValueStore: a group torch creates
//                       rendezvouses through the store torch hands it (torchrun's, env://, a FileStore).
//   RunStore            the store fsdp-run or fsdp-store serves, as a c10d::Store: a Python job under
//                       plain fsdp-run gives it to init_process_group, where env:// would try to serve a
//                       TCPStore of its own on the port the launcher already serves.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "launch/key_value_store.h"
#include "launch/store_client.h"

namespace fsdp::torch_backend {

std::shared_ptr<launch::KeyValueStore> as_key_value_store(c10::intrusive_ptr<c10d::Store> store);

// Connects to host:port with the job secret of the environment (launch/store_client.h). Values are bytes
// both ways; get() and wait() wait for keys up to the timeout torch sets (init_process_group's), other
// calls are bounded by the client's own call timeout.
class RunStore : public c10d::Store {
 public:
  RunStore(std::string host, uint16_t port, std::chrono::milliseconds timeout);
  // The launcher's store when one serves this job (FSDP_STORE_EXTERNAL, set by fsdp-run unless
  // --no-store, at MASTER_ADDR:MASTER_PORT); null otherwise.
  static c10::intrusive_ptr<RunStore> from_env(std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  std::string describe() const { return client_.describe(); }

 private:
  launch::StoreClient client_;
};

}  // namespace fsdp::torch_backend
