// TorchStoreClient against the real thing: a torch.distributed.TCPStore served by the Python that has
// torch (FSDP_TORCH_PYTHON), whose own client trades keys with ours (most of its few seconds are the
// import of torch). Skipped where torch is missing.
// A fake validated-dialect server (torch >= 2.1's handshake) checks the dialect probe without torch.
#include "launch/torch_store_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/types/errors.h"
#include "launch/torchrun_store.h"

namespace fsdp::launch {
namespace {

using std::chrono::milliseconds;

// The torch side: serves the store, prints its port and torch's version, then plays the peer.
constexpr const char* kTorchPeer = R"PY(
import datetime, sys, torch, torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=20), wait_for_workers=False)
print(store.port, torch.__version__, flush=True)
store.set("ns/from_torch", "hello")
value = store.get("ns/from_fsdp")
store.set("ns/echo", value + b"!")
store.add("ns/counter", 5)
store.set("ns/torch_added", "1")
store.compare_set("ns/decision", "", "torch")
store.set("ns/decided", "1")  # torch's server wakes waiters on set only, not on compare_set
store.get("ns/done")
)PY";

bool torch_importable() { return std::system(FSDP_TORCH_PYTHON " -c 'import torch.distributed' >/dev/null 2>&1") == 0; }

TEST(TorchStoreClient, TradesKeysWithTorchsOwnClient) {
  if (!torch_importable()) GTEST_SKIP() << FSDP_TORCH_PYTHON " cannot import torch.distributed";
  char script[] = "/tmp/fsdp-torch-peer-XXXXXX";
  const int fd = ::mkstemp(script);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, kTorchPeer, std::strlen(kTorchPeer)), static_cast<ssize_t>(std::strlen(kTorchPeer)));
  ::close(fd);
  FILE* peer = ::popen((std::string(FSDP_TORCH_PYTHON) + " " + script).c_str(), "r");
  ASSERT_NE(peer, nullptr);
  int port = 0;
  char version[64] = {};
  ASSERT_EQ(std::fscanf(peer, "%d %63s", &port, version), 2);
  ::unlink(script);

  TorchStoreClient store("127.0.0.1", static_cast<uint16_t>(port), milliseconds(20000), "ns/");
  // torch 1.x and 2.0 speak the legacy dialect, 2.1 on the validated one.
  const bool legacy = version[0] == '1' || std::string(version).rfind("2.0", 0) == 0;
  EXPECT_EQ(store.dialect(), legacy ? TorchStoreClient::Dialect::kLegacy : TorchStoreClient::Dialect::kValidated)
      << "torch " << version;

  EXPECT_EQ(store.get("from_torch"), "hello");
  EXPECT_EQ(store.add("counter", 3), 3);
  const std::string binary("a\0b", 3);
  store.set("from_fsdp", binary);
  EXPECT_EQ(store.get("echo"), binary + "!");
  store.wait({"torch_added"});
  EXPECT_EQ(store.get("counter"), "8");  // counters are decimal text on both sides
  EXPECT_EQ(store.add("counter", 0), 8);

  // A wait that times out names the key; the client reconnects for the next call.
  try {
    store.get("never", milliseconds(100));
    ADD_FAILURE() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.get("from_torch"), "hello");
  // A timeout of 0 only looks (KeyValueStore's contract): present keys pass, a missing one times out at once.
  EXPECT_NO_THROW(store.wait({"from_torch", "torch_added"}, milliseconds(0)));
  EXPECT_THROW(store.wait({"from_torch", "never"}, milliseconds(0)), TimeoutError);
  EXPECT_EQ(store.get("from_torch", milliseconds(0)), "hello");
  // compare_set in torch's own server: the key torch created wins over ours; a missing key with a
  // non-empty expected reads "" (torch answers `expected` there), and "" creates a key.
  store.wait({"decided"});
  EXPECT_EQ(store.compare_set("decision", "", "fsdp"), "torch");
  EXPECT_EQ(store.compare_set("decision", "torch", "commit"), "commit");
  EXPECT_EQ(store.get("decision"), "commit");
  EXPECT_EQ(store.compare_set("absent", "x", "y"), "");
  EXPECT_THROW(store.get("absent", milliseconds(0)), TimeoutError);
  EXPECT_EQ(store.compare_set("absent", "", "made"), "made");
  EXPECT_EQ(store.get("absent"), "made");
  if (legacy) {
    EXPECT_TRUE(store.erase("from_torch"));
    EXPECT_FALSE(store.erase("from_torch"));
  }
  store.set("done", "1");
  EXPECT_EQ(::pclose(peer), 0);
}

// torch >= 2.1's rule: the first command must be VALIDATE with the magic, else the connection closes.
// Then SET/GET/WAIT/ADD/GETNUMKEYS with codes one above the legacy ones.
class FakeValidatedServer {
 public:
  FakeValidatedServer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listener_, 8);
    socklen_t len = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeValidatedServer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  bool has(const std::string& wire_key) {
    std::lock_guard lock(mu_);
    return kv_.count(wire_key) > 0;
  }
  int refused = 0;  // connections closed for a first command other than VALIDATE

 private:
  static bool read_all(int fd, void* p, size_t n) {
    for (size_t done = 0; done < n;) {
      const ssize_t r = ::recv(fd, static_cast<char*>(p) + done, n - done, 0);
      if (r <= 0) return false;
      done += r;
    }
    return true;
  }
  static std::string read_string(int fd) {
    uint64_t n = 0;
    std::string s;
    if (!read_all(fd, &n, 8)) return s;
    s.resize(n);
    read_all(fd, s.data(), n);
    return s;
  }
  void serve() {
    for (;;) {
      const int c = ::accept(listener_, nullptr, nullptr);
      if (c < 0) return;
      uint8_t cmd = 0xff;
      uint32_t magic = 0;
      if (!read_all(c, &cmd, 1) || cmd != 0 || !read_all(c, &magic, 4) || magic != 0x3C85F7CE) {
        ++refused;
        ::close(c);
        continue;
      }
      while (read_all(c, &cmd, 1)) {
        if (cmd == 1) {  // SET
          const std::string k = read_string(c);
          const std::string v = read_string(c);
          std::lock_guard lock(mu_);
          kv_[k] = v;
        } else if (cmd == 2) {  // COMPARE_SET, as torch's server answers it
          const std::string k = read_string(c);
          const std::string expected = read_string(c);
          const std::string desired = read_string(c);
          std::unique_lock lock(mu_);
          auto it = kv_.find(k);
          std::string v = expected;  // missing, expected non-empty: torch answers expected
          if (it == kv_.end() && expected.empty()) v = kv_[k] = desired;
          if (it != kv_.end()) v = it->second == expected ? it->second = desired : it->second;
          lock.unlock();
          const uint64_t n = v.size();
          ::send(c, &n, 8, MSG_NOSIGNAL);
          ::send(c, v.data(), n, MSG_NOSIGNAL);
        } else if (cmd == 6) {  // WAIT (one key, present in this test)
          uint64_t n = 0;
          read_all(c, &n, 8);
          for (uint64_t i = 0; i < n; ++i) read_string(c);
          const uint8_t stop = 0;
          ::send(c, &stop, 1, MSG_NOSIGNAL);
        } else if (cmd == 3) {  // GET
          const std::string k = read_string(c);
          std::unique_lock lock(mu_);
          const std::string v = kv_[k];
          lock.unlock();
          const uint64_t n = v.size();
          ::send(c, &n, 8, MSG_NOSIGNAL);
          ::send(c, v.data(), n, MSG_NOSIGNAL);
        } else if (cmd == 7) {  // GETNUMKEYS
          const int64_t n = static_cast<int64_t>(kv_.size());
          ::send(c, &n, 8, MSG_NOSIGNAL);
        } else {
          break;
        }
      }
      ::close(c);
    }
  }
  int listener_ = -1;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
  std::thread thread_;
};

TEST(TorchStoreClient, FindsTheValidatedDialect) {
  FakeValidatedServer server;
  {
    TorchStoreClient store("127.0.0.1", server.port(), milliseconds(5000), "ns/");
    EXPECT_EQ(store.dialect(), TorchStoreClient::Dialect::kValidated);
    store.set("k", "v");
    EXPECT_EQ(store.get("k"), "v");
    EXPECT_FALSE(store.erase("k"));  // not asked: DELETE_KEY's code differs between 2.x releases
    EXPECT_EQ(store.compare_set("c", "x", "y"), "");
    EXPECT_EQ(store.compare_set("c", "", "first"), "first");
    EXPECT_EQ(store.compare_set("c", "", "second"), "first");
    EXPECT_EQ(store.compare_set("c", "first", "second"), "second");
    EXPECT_NE(store.describe().find(">= 2.1"), std::string::npos) << store.describe();
  }
  EXPECT_EQ(server.refused, 1);  // the legacy probe, refused as torch >= 2.1 refuses it
}

TEST(TorchStoreClient, NothingListeningTimesOut) {
  // A port bound but not listening: connections are refused, and nobody else can take it meanwhile.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  try {
    TorchStoreClient("127.0.0.1", ntohs(addr.sin_port), milliseconds(200));
    ADD_FAILURE() << "connected to nothing";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("torchrun's agent"), std::string::npos) << e.what();
  }
  ::close(fd);
}

// The decision connect_world takes at step 1: torchrun's agent store only when torchrun says it serves
// one and nothing names a store of ours; keys then under the run id and the attempt.
TEST(TorchrunStore, JoinsTheAgentStoreOnlyWhenTorchrunSaysSo) {
  FakeValidatedServer server;
  ProcessEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = server.port();
  std::map<std::string, std::string> vars = {
      {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RUN_ID", "run7"}, {"TORCHELASTIC_RESTART_COUNT", "2"}};
  const EnvReader reader = [&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  auto store = join_torchrun_store(env, false, milliseconds(5000), reader);
  ASSERT_NE(store, nullptr);
  store->set("fsdp/default/host/1", "h");
  EXPECT_EQ(store->get("fsdp/default/host/1"), "h");
  EXPECT_TRUE(server.has("/fsdp.torchrun/run7/2/fsdp/default/host/1"));

  EXPECT_EQ(join_torchrun_store(env, /*external_store=*/true, milliseconds(5000), reader), nullptr);
  vars["FSDP_MASTER_PORT"] = "29511";
  EXPECT_EQ(join_torchrun_store(env, false, milliseconds(5000), reader), nullptr);
  vars.erase("FSDP_MASTER_PORT");
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // torch 1.13's --standalone: rank 0 serves ours
  EXPECT_EQ(join_torchrun_store(env, false, milliseconds(5000), reader), nullptr);
  vars.erase("TORCHELASTIC_USE_AGENT_STORE");  // fsdp-run, or RANK/WORLD_SIZE set by hand
  EXPECT_EQ(join_torchrun_store(env, false, milliseconds(5000), reader), nullptr);
}

}  // namespace
}  // namespace fsdp::launch
