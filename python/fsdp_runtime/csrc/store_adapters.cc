#include "python/fsdp_runtime/csrc/store_adapters.h"

#include <algorithm>

#include "collectives/types/errors.h"
#include "launch/bootstrap.h"
#include "launch/torch_store_client.h"  // from_torch_compare_set
#include "launch/world.h"

namespace fsdp::torch_backend {
namespace {

using std::chrono::milliseconds;

// torch's store as the launch layer's KeyValueStore: connect_world publishes host identities, the
// job id, the transport and addresses under "fsdp/" in it (torch's PrefixStore already names the group).
// c10d reports a missing key as a generic error; it becomes TimeoutError so connect_world's messages
// say who waited for whom.
class C10dStore : public launch::KeyValueStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key) override { return get(key, store_->getTimeout()); }
  std::string get(const std::string& key, milliseconds timeout) override {
    wait({key}, timeout);
    const std::vector<uint8_t> v = store_->get(key);
    return std::string(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_->getTimeout()); }
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    try {
      // c10d reads 0 as "no timeout": a look (KeyValueStore's 0) is its smallest wait instead.
      store_->wait(keys, std::max(timeout, milliseconds(1)));
    } catch (const std::exception& e) {
      std::string names;
      for (const std::string& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
      throw TimeoutError(ErrorContext{-1, -1, "store", 0, 0},
                         "keys " + names + " missing at " + describe() + ": " + e.what());
    }
  }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    const std::vector<uint8_t> v = store_->compareSet(key, std::vector<uint8_t>(expected.begin(), expected.end()),
                                                      std::vector<uint8_t>(desired.begin(), desired.end()));
    return launch::from_torch_compare_set(std::string(v.begin(), v.end()), expected, desired);
  }
  bool erase(const std::string& key) override { return store_->deleteKey(key); }
  std::string describe() const override { return "torch's c10d store"; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

std::string as_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> as_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

std::shared_ptr<launch::KeyValueStore> as_key_value_store(c10::intrusive_ptr<c10d::Store> store) {
  return std::make_shared<C10dStore>(std::move(store));
}

RunStore::RunStore(std::string host, uint16_t port, milliseconds timeout)
    : c10d::Store(timeout), client_(std::move(host), port) {}

c10::intrusive_ptr<RunStore> RunStore::from_env(milliseconds timeout) {
  if (!launch::store_external_from_env()) return {};
  const launch::ProcessEnv env = launch::detect_process_env();
  if (env.master_addr.empty() || env.master_port == 0) {
    throw InvalidArgument(
        "FSDP_STORE_EXTERNAL=1 says a launcher serves the store, but MASTER_ADDR / MASTER_PORT "
        "do not say where (start the job with fsdp-run, or unset FSDP_STORE_EXTERNAL)");
  }
  return c10::make_intrusive<RunStore>(env.master_addr, env.master_port, timeout);
}

void RunStore::set(const std::string& key, const std::vector<uint8_t>& value) { client_.set(key, as_string(value)); }

std::vector<uint8_t> RunStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) {
  return as_bytes(client_.compare_set(key, as_string(expected), as_string(desired)));
}

std::vector<uint8_t> RunStore::get(const std::string& key) { return as_bytes(client_.get(key, timeout_)); }

int64_t RunStore::add(const std::string& key, int64_t value) { return client_.add(key, value); }

bool RunStore::deleteKey(const std::string& key) { return client_.erase(key); }

bool RunStore::check(const std::vector<std::string>& keys) {
  try {
    client_.wait(keys, milliseconds(0));  // answered at once: every key there, or a timeout
    return true;
  } catch (const TimeoutError&) {
    return false;
  }
}

int64_t RunStore::getNumKeys() { return client_.num_keys(); }

void RunStore::wait(const std::vector<std::string>& keys) { client_.wait(keys, timeout_); }

void RunStore::wait(const std::vector<std::string>& keys, const milliseconds& timeout) { client_.wait(keys, timeout); }

}  // namespace fsdp::torch_backend
