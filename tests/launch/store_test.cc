// The rendezvous store over real sockets on 127.0.0.1: op semantics, many concurrent clients, timeouts,
// a server that shrugs off clients speaking garbage, and one that holds under abuse: oversized
// announced frames, abandoned parked waits, idle connections past its limit, stalled bodies.
#include "launch/store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/types/errors.h"
#include "launch/fork_ranks.h"
#include "proto/store.pb.h"

namespace fsdp::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Short bounds so a hang fails the test in seconds rather than the default 30 s.
StoreClientOptions quick_options() {
  StoreClientOptions options;
  options.connect_timeout = 2s;
  options.timeout = 2s;
  return options;
}

// A plain socket, to send what no StoreClient would. It passes the job-secret handshake first (with
// `key`, the empty one of a server without a secret) unless told not to, so what it sends next
// reaches the request parser.
class RawSocket {
 public:
  static constexpr bool kUnauthenticated = false;

  explicit RawSocket(uint16_t port, bool authenticate = true, const std::string& key = "")
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
    if (connected_ && authenticate) connected_ = handshake(key);
  }
  // The client's side of the handshake (store.h); false when the server did not accept the proof.
  bool handshake(const std::string& key) {
    std::string challenge(kStoreAuthMagic.size() + kAuthNonceBytes, '\0');
    if (!recv_all(&challenge)) return false;
    const std::string nonce = random_bytes(kAuthNonceBytes);
    const std::string transcript = challenge.substr(kStoreAuthMagic.size()) + nonce;
    const Digest proof = auth_proof(key, kStoreClientLabel, transcript);
    if (!send_all(nonce + std::string(reinterpret_cast<const char*>(proof.data()), proof.size()))) return false;
    std::string answer(sizeof(Digest), '\0');
    return recv_all(&answer);
  }
  bool recv_all(std::string* bytes) {
    return ::recv(fd_, bytes->data(), bytes->size(), MSG_WAITALL) == static_cast<ssize_t>(bytes->size());
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool send_all(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // True when the peer closed the connection (EOF or reset) within `timeout`.
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char byte;
    return ::recv(fd_, &byte, 1, 0) <= 0;
  }

 private:
  int fd_;
  bool connected_ = false;
};

std::string length_prefix(uint32_t size) {
  return std::string{static_cast<char>(size), static_cast<char>(size >> 8), static_cast<char>(size >> 16),
                     static_cast<char>(size >> 24)};
}

// Open descriptors of this process: the server's sockets and the test's raw ones alike.
size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Resident memory of this process in bytes.
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// Polls `done` until it holds or `bound` passed; the bound only keeps a broken server from hanging the test.
template <class F>
bool eventually(F done, std::chrono::milliseconds bound = 5s) {
  const auto end = Clock::now() + bound;
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::string request_frame(const proto::StoreRequest& request) {
  const std::string body = request.SerializeAsString();
  return length_prefix(static_cast<uint32_t>(body.size())) + body;
}

// A client that must be answered within 1 s throughout an attack (the connect and call bound).
StoreClientOptions one_second() {
  StoreClientOptions options;
  options.connect_timeout = 1s;
  options.timeout = 1s;
  return options;
}

TEST(Store, ServerReportsTheKernelChosenPort) {
  StoreServer server("127.0.0.1", 0);
  EXPECT_NE(server.port(), 0);
  EXPECT_EQ(server.address(), "127.0.0.1:" + std::to_string(server.port()));
}

TEST(Store, SetGetOverwrite) {
  StoreServer server;
  StoreClient client("127.0.0.1", server.port(), quick_options());
  client.set("a", "1");
  EXPECT_EQ(client.get("a"), "1");
  client.set("a", std::string("bin\0ary", 7));  // values are bytes, not C strings
  EXPECT_EQ(client.get("a"), std::string("bin\0ary", 7));
  client.set("empty", "");
  EXPECT_EQ(client.get("empty"), "");
}

TEST(Store, AddIsADecimalCounter) {
  StoreServer server;
  StoreClient client("127.0.0.1", server.port(), quick_options());
  EXPECT_EQ(client.add("n", 5), 5);  // a missing key counts as 0
  EXPECT_EQ(client.add("n", -7), -2);
  EXPECT_EQ(client.get("n"), "-2");
  client.set("m", "40");
  EXPECT_EQ(client.add("m", 2), 42);
  client.set("text", "forty");
  EXPECT_THROW(client.add("text", 1), InvalidArgument);
  client.set("big", std::to_string(INT64_MAX));
  EXPECT_THROW(client.add("big", 1), InvalidArgument);
  EXPECT_EQ(client.get("big"), std::to_string(INT64_MAX));  // a rejected add changes nothing
  EXPECT_EQ(client.add("n", 0), -2);                        // the connection survives rejected requests
}

TEST(Store, CompareSet) {
  StoreServer server;
  StoreClient client("127.0.0.1", server.port(), quick_options());
  EXPECT_EQ(client.compare_set("k", "x", "y"), "");  // missing and expected non-empty: nothing set
  EXPECT_EQ(client.num_keys(), 0);
  EXPECT_EQ(client.compare_set("k", "", "first"), "first");        // missing equals "": created
  EXPECT_EQ(client.compare_set("k", "wrong", "second"), "first");  // mismatch: current value back
  EXPECT_EQ(client.compare_set("k", "first", "second"), "second");
  EXPECT_EQ(client.get("k"), "second");
}

// Many clients racing compare_set(k, "", x_i) through the KeyValueStore interface: exactly one stores
// its x_i, and every one of them reads that winner back. A parked get wakes on the created key.
TEST(Store, CompareSetRaceHasOneWinnerEveryoneReads) {
  StoreServer server;
  constexpr int kClients = 8;
  for (int round = 0; round < 20; ++round) {
    const std::string key = "decision" + std::to_string(round);
    std::vector<std::string> read(kClients);
    std::vector<std::thread> threads;
    std::string parked;
    std::thread waiter([&] {
      StoreClient client("127.0.0.1", server.port(), quick_options());
      parked = client.get(key);
    });
    for (int i = 0; i < kClients; ++i) {
      threads.emplace_back([&, i] {
        std::unique_ptr<KeyValueStore> client =
            std::make_unique<StoreClient>("127.0.0.1", server.port(), quick_options());
        read[i] = client->compare_set(key, "", "x" + std::to_string(i));
      });
    }
    for (auto& t : threads) t.join();
    waiter.join();
    int winners = 0;
    for (int i = 0; i < kClients; ++i) winners += read[i] == "x" + std::to_string(i);
    EXPECT_EQ(winners, 1) << "round " << round;
    for (int i = 0; i < kClients; ++i) EXPECT_EQ(read[i], read[0]) << "round " << round << " client " << i;
    EXPECT_EQ(parked, read[0]);
  }
}

TEST(Store, DeleteAndNumKeys) {
  StoreServer server;
  StoreClient client("127.0.0.1", server.port(), quick_options());
  EXPECT_EQ(client.num_keys(), 0);
  client.set("a", "1");
  client.set("b", "2");
  client.set("a", "3");
  EXPECT_EQ(client.num_keys(), 2);
  EXPECT_TRUE(client.erase("a"));
  EXPECT_FALSE(client.erase("a"));
  EXPECT_EQ(client.num_keys(), 1);
  EXPECT_THROW(client.get("a", 50ms), TimeoutError);
}

TEST(Store, GetWaitsForALaterSet) {
  StoreServer server;
  StoreClient reader("127.0.0.1", server.port(), quick_options());
  std::thread writer([&] {
    StoreClient client("127.0.0.1", server.port(), quick_options());
    std::this_thread::sleep_for(100ms);
    client.set("late", "value");
  });
  EXPECT_EQ(reader.get("late", 1500ms), "value");
  writer.join();
}

TEST(Store, SixteenClientsAddExactlyAndWaitForLaterKeys) {
  constexpr int kClients = 16;
  constexpr int kAddsEach = 100;
  StoreServer server;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        StoreClient client("127.0.0.1", server.port(), quick_options());
        for (int j = 0; j < kAddsEach; ++j) client.add("counter", 1);
        // Every waiter parks on the server at once; none may block the others or the setter.
        client.wait({"go", "slot" + std::to_string(i)}, 1500ms);
        if (client.get("slot" + std::to_string(i)) != "v" + std::to_string(i)) ++failures;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << i << ": " << e.what();
        ++failures;
      }
    });
  }
  StoreClient setter("127.0.0.1", server.port(), quick_options());
  // Set the keys only once every client is done adding, so that all sixteen are parked (or about to
  // be) when they appear.
  const auto give_up = Clock::now() + 1500ms;
  while (setter.get("counter") != std::to_string(kClients * kAddsEach) && Clock::now() < give_up) {
    std::this_thread::sleep_for(5ms);
  }
  std::this_thread::sleep_for(50ms);
  for (int i = 0; i < kClients; ++i) setter.set("slot" + std::to_string(i), "v" + std::to_string(i));
  setter.set("go", "1");
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(setter.get("counter"), std::to_string(kClients * kAddsEach));
}

TEST(Store, WaitTimesOutAroundItsTimeoutNamingTheKeys) {
  StoreServer server;
  StoreClient client("127.0.0.1", server.port(), quick_options());
  client.set("present", "1");
  const auto start = Clock::now();
  try {
    client.wait({"present", "absent"}, 300ms);
    FAIL() << "wait returned for a key nobody set";
  } catch (const TimeoutError& e) {
    const auto elapsed = Clock::now() - start;
    EXPECT_GE(elapsed, 290ms);
    EXPECT_LT(elapsed, 10s);  // only "no hang": a loaded CI machine may be seconds late
    EXPECT_NE(std::string(e.what()).find("'absent'"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("'present' still"), std::string::npos) << e.what();
  }
  try {
    client.get("missing", 100ms);
    FAIL() << "get returned for a key nobody set";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'missing'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(client.get("present"), "1");  // a timed-out wait leaves the connection usable
}

TEST(Store, ConnectingToNothingTimesOutNamingTheAddress) {
  uint16_t port = 0;
  {
    StoreServer server;  // borrow a port that was free, then free it again
    port = server.port();
  }
  StoreClientOptions options = quick_options();
  options.connect_timeout = 300ms;
  const auto start = Clock::now();
  try {
    StoreClient client("127.0.0.1", port, options);
    FAIL() << "connected to a port with nothing listening";
  } catch (const TimeoutError& e) {
    EXPECT_LT(Clock::now() - start, 10s);  // only "no hang"
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  }
}

TEST(Store, MalformedFrameClosesOnlyThatConnection) {
  StoreServer server;
  StoreClient good("127.0.0.1", server.port(), quick_options());
  good.set("k", "v");
  RawSocket bad(server.port());
  ASSERT_TRUE(bad.connected());
  // Eleven 0xff bytes: a varint tag longer than protobuf allows, so no message parses from it.
  const std::string garbage(11, '\xff');
  ASSERT_TRUE(bad.send_all(length_prefix(static_cast<uint32_t>(garbage.size())) + garbage));
  EXPECT_TRUE(bad.closed_by_peer(1s));
  EXPECT_EQ(good.get("k"), "v");
  good.set("k2", "v2");
  EXPECT_EQ(good.num_keys(), 2);
}

TEST(Store, OversizedLengthPrefixClosesOnlyThatConnection) {
  StoreServer server;
  StoreClient good("127.0.0.1", server.port(), quick_options());
  RawSocket bad(server.port());
  ASSERT_TRUE(bad.connected());
  ASSERT_TRUE(bad.send_all(length_prefix(kStoreMaxFrameBytes + 1)));
  EXPECT_TRUE(bad.closed_by_peer(1s));  // without waiting for 64 MiB that will never come
  RawSocket huge(server.port());
  ASSERT_TRUE(huge.connected());
  ASSERT_TRUE(huge.send_all(length_prefix(0xffffffffu)));
  EXPECT_TRUE(huge.closed_by_peer(1s));
  good.set("still", "here");
  EXPECT_EQ(good.get("still"), "here");
}

TEST(Store, StoppingTheServerReleasesParkedClients) {
  auto server = std::make_unique<StoreServer>();
  StoreClient client("127.0.0.1", server->port(), quick_options());
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    server.reset();
  });
  // The wait's own timeout is far away, so ending well before it proves the stop released it.
  const auto start = Clock::now();
  EXPECT_THROW(client.wait({"never"}, 60s), CommError);
  EXPECT_LT(Clock::now() - start, 30s);
  stopper.join();
}

// 200 connections each announce a frame of the largest allowed size and send a few bytes of it: the
// server's memory grows by what arrived (a few KiB each), not by 200 x 64 MiB, and a legitimate client
// is answered within its 1 s bound while they hang on.
TEST(StoreAbuse, OversizedAnnouncedFramesCostOnlyWhatArrived) {
  StoreServer server;
  StoreClient good("127.0.0.1", server.port(), one_second());
  good.set("k", "v");
  const size_t rss_before = resident_bytes();
  std::vector<std::unique_ptr<RawSocket>> attackers;
  for (int i = 0; i < 200; ++i) {
    attackers.push_back(std::make_unique<RawSocket>(server.port()));
    ASSERT_TRUE(attackers.back()->connected());
    ASSERT_TRUE(attackers.back()->send_all(length_prefix(kStoreMaxFrameBytes) + std::string(100, 'x')));
    if (i % 50 == 49) {
      EXPECT_EQ(good.get("k"), "v");
    }
  }
  good.set("k2", "v2");
  EXPECT_EQ(good.get("k2"), "v2");
  // 200 x 64 MiB would be 12.5 GiB; 64 MiB of growth allows anything but an allocation per announcement.
  EXPECT_LT(resident_bytes(), rss_before + (size_t{64} << 20));
}

// Clients park a WAIT for a key that never comes, then hang up: the server notices each hang-up while
// parked and frees its descriptor then, not at the 1-hour timeout.
TEST(StoreAbuse, AbandonedParkedWaitsFreeTheirDescriptors) {
  StoreServer server;
  StoreClient good("127.0.0.1", server.port(), one_second());
  good.set("k", "v");
  const size_t baseline = open_descriptors();
  proto::StoreRequest wait;
  wait.set_op(proto::StoreRequest::OP_WAIT);
  wait.add_keys("never");
  wait.set_timeout_ms(3600 * 1000);
  {
    std::vector<std::unique_ptr<RawSocket>> parked;
    for (int i = 0; i < 100; ++i) {
      parked.push_back(std::make_unique<RawSocket>(server.port()));
      ASSERT_TRUE(parked.back()->connected());
      ASSERT_TRUE(parked.back()->send_all(request_frame(wait)));
    }
    EXPECT_EQ(good.get("k"), "v");  // they are parked, and the server still answers
  }  // every parked client hangs up
  EXPECT_TRUE(eventually([&] { return open_descriptors() <= baseline; }))
      << open_descriptors() << " descriptors open, " << baseline << " before";
  EXPECT_EQ(good.get("k"), "v");
}

// More idle connections than the server holds: it closes the idle longest to admit each new one
// rather than stop accepting, so a legitimate client gets in and is answered; the evicted ones see
// their connection closed. Nothing leaks once they are gone.
TEST(StoreAbuse, IdleConnectionsPastTheLimitDoNotLockClientsOut) {
  StoreServerOptions options;
  options.max_connections = 16;
  StoreServer server("127.0.0.1", 0, options);
  const size_t baseline = open_descriptors();
  {
    std::vector<std::unique_ptr<RawSocket>> idle;
    for (int i = 0; i < 100; ++i) {
      idle.push_back(std::make_unique<RawSocket>(server.port()));
      ASSERT_TRUE(idle.back()->connected());
    }
    StoreClient good("127.0.0.1", server.port(), one_second());
    good.set("k", "v");
    EXPECT_EQ(good.get("k"), "v");
    EXPECT_TRUE(idle.front()->closed_by_peer(5s));  // the first to come was idle longest
  }
  EXPECT_TRUE(eventually([&] { return open_descriptors() <= baseline; }))
      << open_descriptors() << " descriptors open, " << baseline << " before";
}

// Idle connections are closed after the idle timeout; a StoreClient whose connection went that way
// notices before its next call and reconnects, so callers never see it.
TEST(StoreAbuse, IdleTimeoutClosesConnectionsAndClientsReconnect) {
  StoreServerOptions options;
  options.idle_timeout = 100ms;
  StoreServer server("127.0.0.1", 0, options);
  StoreClient good("127.0.0.1", server.port(), one_second());
  good.set("k", "v");
  RawSocket idle(server.port());
  ASSERT_TRUE(idle.connected());
  EXPECT_TRUE(idle.closed_by_peer(5s));
  // By now the server closed the client's idle connection too (same timeout, older).
  EXPECT_EQ(good.get("k"), "v");
  EXPECT_EQ(good.add("n", 1), 1);  // not retried blindly: exactly once
  EXPECT_EQ(good.add("n", 1), 2);
}

// A body that stops arriving (or a client that never reads its reply) is cut at the I/O timeout.
TEST(StoreAbuse, StalledBodyIsCutAtTheIoTimeout) {
  StoreServerOptions options;
  options.io_timeout = 100ms;
  StoreServer server("127.0.0.1", 0, options);
  StoreClient good("127.0.0.1", server.port(), one_second());
  RawSocket slow(server.port());
  ASSERT_TRUE(slow.connected());
  ASSERT_TRUE(slow.send_all(length_prefix(1000) + std::string(10, 'x')));
  EXPECT_TRUE(slow.closed_by_peer(5s));
  good.set("k", "v");
  EXPECT_EQ(good.get("k"), "v");
}

// The server's process out of descriptors (accept fails with EMFILE): it frees the connection idle
// longest and retries after a pause instead of spinning, so a new client still gets in and is answered
// within its 1 s bound. Two processes: the server under a 64-descriptor limit that then uses up the
// rest itself, and the clients.
TEST(StoreAbuse, OutOfDescriptorsTheServerStillAdmitsAClient) {
  int to_server[2], to_client[2];
  ASSERT_EQ(::pipe(to_server), 0);
  ASSERT_EQ(::pipe(to_client), 0);
  auto send_byte = [](int fd, char c) { return ::write(fd, &c, 1) == 1; };
  auto read_exact = [](int fd, void* data, size_t size) {
    return ::read(fd, data, size) == static_cast<ssize_t>(size);
  };
  const std::vector<int> codes = fork_ranks(2, 20s, [&](int rank) -> int {
    if (rank == 0) {
      const rlimit limit{64, 64};
      if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 10;
      StoreServer server;
      const uint16_t port = server.port();
      if (::write(to_client[1], &port, sizeof(port)) != sizeof(port)) return 11;
      char c = 0;
      if (!read_exact(to_server[0], &c, 1)) return 12;  // the clients hold their idle connections
      std::vector<int> eaten;
      for (int fd; (fd = ::dup(0)) >= 0;) eaten.push_back(fd);
      if (!send_byte(to_client[1], 'e')) return 13;
      if (!read_exact(to_server[0], &c, 1)) return 14;  // the clients are done
      for (int fd : eaten) ::close(fd);
      return 0;
    }
    uint16_t port = 0;
    if (!read_exact(to_client[0], &port, sizeof(port))) return 20;
    std::vector<std::unique_ptr<RawSocket>> idle;
    for (int i = 0; i < 10; ++i) idle.push_back(std::make_unique<RawSocket>(port));
    int rc = 0;
    {
      StoreClient first("127.0.0.1", port, one_second());  // answered: every idle one was accepted before it
      first.set("k", "v");
    }
    char c = 0;
    if (!send_byte(to_server[1], 'i') || !read_exact(to_client[0], &c, 1)) return 21;
    try {
      StoreClient late("127.0.0.1", port, one_second());
      if (late.get("k") != "v") rc = 22;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "late client: %s\n", e.what());
      rc = 23;
    }
    send_byte(to_server[1], 'd');
    return rc;
  });
  for (int fd : {to_server[0], to_server[1], to_client[0], to_client[1]}) ::close(fd);
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// --- Authentication: every connection proves the job secret before any request is read ---------

StoreServerOptions with_secret(const std::string& secret) {
  StoreServerOptions options;
  options.secret = secret;
  return options;
}

StoreClientOptions quick_with_secret(const std::string& secret) {
  StoreClientOptions options = quick_options();
  options.secret = secret;
  return options;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CommError& e) {
    return e.what();
  }
  return "(no CommError)";
}

TEST(StoreAuth, ClientsWithTheSecretAreServed) {
  const std::string secret = random_bytes(32);
  StoreServer server("127.0.0.1", 0, with_secret(secret));
  StoreClient client("127.0.0.1", server.port(), quick_with_secret(secret));
  client.set("k", "v");
  EXPECT_EQ(client.get("k"), "v");
}

// A client without the secret, or with another, is refused before any request and says why; the
// server goes on serving the job's clients and nothing the stranger meant to write is there.
TEST(StoreAuth, ClientsWithoutTheSecretAreRefused) {
  const std::string secret = random_bytes(32);
  StoreServer server("127.0.0.1", 0, with_secret(secret));
  StoreClient good("127.0.0.1", server.port(), quick_with_secret(secret));
  const std::string none = message_of([&] { StoreClient("127.0.0.1", server.port(), quick_with_secret("")); });
  EXPECT_NE(none.find("refused this client's proof of the job secret"), std::string::npos) << none;
  EXPECT_NE(none.find("this client has no job secret"), std::string::npos) << none;
  const std::string other =
      message_of([&] { StoreClient("127.0.0.1", server.port(), quick_with_secret(random_bytes(32))); });
  EXPECT_NE(other.find("refused this client's proof of the job secret"), std::string::npos) << other;
  good.set("k", "v");
  EXPECT_EQ(good.get("k"), "v");
}

// A client holding the secret refuses a server that cannot prove it (a squatter on the port, or a
// store started without the job's secret).
TEST(StoreAuth, ServersWithoutTheSecretAreRefusedByClients) {
  StoreServer server("127.0.0.1", 0, with_secret(""));
  const std::string what =
      message_of([&] { StoreClient("127.0.0.1", server.port(), quick_with_secret(random_bytes(32))); });
  EXPECT_NE(what.find("job secret"), std::string::npos) << what;
}

// A raw client that skips the handshake and sends a SET at once: its bytes are taken for a proof,
// which is wrong, so the connection is closed and the key never written.
TEST(StoreAuth, AnUnauthenticatedRequestIsNeverExecuted) {
  const std::string secret = random_bytes(32);
  StoreServer server("127.0.0.1", 0, with_secret(secret));
  StoreClient good("127.0.0.1", server.port(), quick_with_secret(secret));
  proto::StoreRequest set;
  set.set_op(proto::StoreRequest::OP_SET);
  set.add_keys("fsdp/default/tcp/0");
  set.set_value("10.6.6.6:1");
  RawSocket stranger(server.port(), RawSocket::kUnauthenticated);
  ASSERT_TRUE(stranger.connected());
  std::string challenge(kStoreAuthMagic.size() + kAuthNonceBytes, '\0');
  ASSERT_TRUE(stranger.recv_all(&challenge));
  ASSERT_TRUE(stranger.send_all(request_frame(set) + std::string(64, 'x')));
  EXPECT_TRUE(stranger.closed_by_peer(2s));
  EXPECT_EQ(good.num_keys(), 0);
  // And with the handshake done using the wrong key, likewise.
  RawSocket forger(server.port(), RawSocket::kUnauthenticated);
  ASSERT_TRUE(forger.connected());
  EXPECT_FALSE(forger.handshake(random_bytes(32)));
  EXPECT_EQ(good.num_keys(), 0);
}

// A proof recorded from one connection is worthless on the next: the server's challenge differs.
TEST(StoreAuth, AReplayedProofIsRefused) {
  const std::string secret = random_bytes(32);
  StoreServer server("127.0.0.1", 0, with_secret(secret));
  RawSocket first(server.port(), RawSocket::kUnauthenticated);
  std::string challenge1(kStoreAuthMagic.size() + kAuthNonceBytes, '\0');
  ASSERT_TRUE(first.recv_all(&challenge1));
  const std::string nonce = random_bytes(kAuthNonceBytes);
  const Digest proof = auth_proof(secret, kStoreClientLabel, challenge1.substr(kStoreAuthMagic.size()) + nonce);
  const std::string recorded = nonce + std::string(reinterpret_cast<const char*>(proof.data()), proof.size());
  ASSERT_TRUE(first.send_all(recorded));
  std::string answer(sizeof(Digest), '\0');
  ASSERT_TRUE(first.recv_all(&answer));  // accepted: the proof was right for this challenge

  RawSocket second(server.port(), RawSocket::kUnauthenticated);
  std::string challenge2(challenge1.size(), '\0');
  ASSERT_TRUE(second.recv_all(&challenge2));
  EXPECT_NE(challenge1, challenge2);
  ASSERT_TRUE(second.send_all(recorded));
  EXPECT_TRUE(second.closed_by_peer(2s));
}

// Fifty strangers with a wrong secret: every one is closed, the log says who and why, but in at most
// 5 lines (the window is 10 s, longer than this test), and the job's client is served throughout.
TEST(StoreAuth, RefusalsAreLoggedRateLimited) {
  const std::string secret = random_bytes(32);
  StoreServer server("127.0.0.1", 0, with_secret(secret));
  StoreClient good("127.0.0.1", server.port(), quick_with_secret(secret));
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 50; ++i) {
    RawSocket forger(server.port(), RawSocket::kUnauthenticated);
    ASSERT_TRUE(forger.connected());
    EXPECT_FALSE(forger.handshake(random_bytes(32)));
  }
  good.set("k", "v");
  EXPECT_EQ(good.get("k"), "v");
  const std::string log = ::testing::internal::GetCapturedStderr();
  int lines = 0;
  for (size_t at = log.find("refused: wrong proof"); at != std::string::npos; at = log.find("refused: wrong proof", at + 1))
    ++lines;
  EXPECT_GE(lines, 1) << log;
  EXPECT_LE(lines, 5) << log;
  EXPECT_NE(log.find("closing connection from 127.0.0.1:"), std::string::npos) << log;
}

// Something that is not a store (no challenge, or another protocol's greeting) is refused at once.
TEST(StoreAuth, AServerThatIsNotAStoreIsRefused) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread impostor([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    const std::string greeting = "SSH-2.0-OpenSSH_9.2p1 Debian\r\n";
    (void)::send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(500ms);
    ::close(fd);
  });
  const std::string what = message_of([&] { StoreClient("127.0.0.1", ntohs(addr.sin_port), quick_options()); });
  EXPECT_NE(what.find("is not an fsdp store of this version"), std::string::npos) << what;
  impostor.join();
  ::close(listener);
}

}  // namespace
}  // namespace fsdp::launch
