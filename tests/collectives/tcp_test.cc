// The TCP transport with real processes on 127.0.0.1: the parent binds every rank's listener on
// port 0 before forking (so ports never collide and the address list is known up front, as after a
// rendezvous), each child joins as one rank and checks its own results, and the parent collects exit
// codes within a deadline.
#include "collectives/transports/tcp.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "collectives/transports/message_header.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

struct Job {
  std::vector<TcpListener> listeners;
  std::vector<TcpEndpoint> peers;
};

Job bind_job(int n) {
  Job job;
  for (int r = 0; r < n; ++r) {
    job.listeners.push_back(TcpListener::bind("127.0.0.1"));
    job.peers.push_back(job.listeners.back().endpoint());
  }
  return job;
}

std::unique_ptr<Communicator> join(Job& job, int rank, int n, TcpOptions options = {},
                                   std::chrono::milliseconds connect_timeout = 10s) {
  CommOptions o;
  o.timeout = 20s;
  o.chunk_bytes = 64 * 1024;
  auto transport = make_tcp_transport(rank, n, std::move(job.listeners[rank]), job.peers, connect_timeout, options);
  job.listeners.clear();  // the other ranks' listeners belong to their processes
  return Communicator::create(transport, o);
}

int expect_in(const std::string& what, const std::string& needle) {
  if (what.find(needle) != std::string::npos) return 0;
  std::fprintf(stderr, "expected '%s' in: %s\n", needle.c_str(), what.c_str());
  return 3;
}

// A raw socket to a listener on 127.0.0.1, standing in for a misbehaving peer.
int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Plays the dialing side of the handshake over `fd` as rank hello.from_rank holding `key`: sends the
// hello, reads the reply (into *reply) and answers with the proof. `proof_for` replaces the transcript
// the proof covers (a replay: a proof that was right for another connection's challenge). 0 when
// every byte went; otherwise which step failed.
int dial_handshake(int fd, TcpHello hello, const std::string& key, TcpHello* reply,
                   const std::string& proof_for = "") {
  if (::write(fd, &hello, sizeof(hello)) != sizeof(hello)) return 20;
  if (::recv(fd, reply, sizeof(*reply), MSG_WAITALL) != sizeof(*reply)) return 21;
  const Digest proof =
      auth_proof(key, kTcpDialLabel, proof_for.empty() ? hello_transcript(hello, *reply) : proof_for);
  if (::write(fd, proof.data(), proof.size()) != static_cast<ssize_t>(proof.size())) return 22;
  return 0;
}

TcpHello hello_of(int from, int to, int size) {
  TcpHello h{kTcpHelloMagic, kTcpVersion, from, to, size, 0, 1, {}, {}};
  const std::string nonce = random_bytes(kAuthNonceBytes);
  std::memcpy(h.nonce, nonce.data(), sizeof(h.nonce));
  return h;
}

// (ranks, connections per peer)
class TcpProcesses : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(TcpProcesses, EveryCollectiveMatchesReference) {
  const auto& [n, connections] = GetParam();
  Job job = bind_job(n);
  auto codes = run_processes(n, 60s, [&, n = n, connections = connections](int rank) {
    TcpOptions t;
    t.connections_per_peer = connections;
    auto comm = join(job, rank, n, t);
    return run_collectives_suite(*comm, rank, n);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpProcesses,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 4)),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_c" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Both sides of a size mismatch fail and name both ranks and sizes (test_support.h has the scenario);
// a self-send goes through the loopback path.
TEST(TcpTransport, SizeMismatchAndSelfSend) {
  Job job = bind_job(2);
  auto codes = run_processes(2, 30s, [&](int rank) {
    auto transport = make_tcp_transport(rank, 2, std::move(job.listeners[rank]), job.peers, 10s);
    job.listeners.clear();
    return size_mismatch_scenario(*transport);
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// FSDP_TCP_CONNECTIONS and FSDP_TCP_SOCKET_BUFFER_BYTES override the defaults; a bad value is
// refused naming the variable.
TEST(TcpOptions, FromEnvironment) {
  ::unsetenv("FSDP_TCP_CONNECTIONS");
  ::unsetenv("FSDP_TCP_SOCKET_BUFFER_BYTES");
  EXPECT_EQ(TcpOptions::from_env().connections_per_peer, TcpOptions{}.connections_per_peer);
  EXPECT_EQ(TcpOptions::from_env().socket_buffer_bytes, TcpOptions{}.socket_buffer_bytes);
  ::setenv("FSDP_TCP_CONNECTIONS", "4", 1);
  ::setenv("FSDP_TCP_SOCKET_BUFFER_BYTES", "0", 1);
  EXPECT_EQ(TcpOptions::from_env().connections_per_peer, 4);
  EXPECT_EQ(TcpOptions::from_env().socket_buffer_bytes, 0);
  for (const char* bad : {"0", "9", "two", "4x"}) {
    ::setenv("FSDP_TCP_CONNECTIONS", bad, 1);
    try {
      TcpOptions::from_env();
      ADD_FAILURE() << "FSDP_TCP_CONNECTIONS=" << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("FSDP_TCP_CONNECTIONS"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("FSDP_TCP_CONNECTIONS");
  ::unsetenv("FSDP_TCP_SOCKET_BUFFER_BYTES");
}

// A rank that dies mid-job is reported as lost, by name, long before the timeout.
TEST(TcpFaults, KilledPeerIsReportedQuickly) {
  Job job = bind_job(2);
  auto codes = run_processes(2, 30s, [&](int rank) {
    auto comm = join(job, rank, 2);
    return killed_peer_scenario(*comm);
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

TEST(TcpFaults, RankThatNeverConnectsTimesOut) {
  Job job = bind_job(3);
  auto codes = run_processes(2, 30s, [&](int rank) {  // rank 2 never comes; its listener stays silent
    try {
      make_tcp_transport(rank, 3, std::move(job.listeners[rank]), job.peers, 500ms);
      return 2;
    } catch (const TimeoutError& e) {
      return expect_in(e.what(), "ranks 2 never connected");
    }
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// A fake rank 0 proves the job secret (the empty one here) with `hello`, then does `then` on its
// connection and reads until rank 1 goes. Rank 1's start-up must fail at once (a CommError, not its
// timeout) with every text of `want`. Returns both exit codes.
std::vector<int> fake_rank_0_fails_start(const TcpHello& hello, const std::function<int(int)>& then,
                                         const std::vector<std::string>& want) {
  Job job = bind_job(2);
  return run_processes(2, 30s, [&](int rank) {
    if (rank == 0) {
      const int fd = raw_connect(job.peers[1].port);
      if (fd < 0) return 5;
      TcpHello reply{};
      int rc = dial_handshake(fd, hello, "", &reply);
      if (rc == 0) rc = then(fd);
      char bytes[256];
      while (::recv(fd, bytes, sizeof(bytes), 0) > 0) {
      }  // rank 1's own hello perhaps, then the connection closes
      ::close(fd);
      return rc;
    }
    try {
      make_tcp_transport(1, 2, std::move(job.listeners[1]), job.peers, 20s);
      return 2;
    } catch (const TimeoutError& e) {
      std::fprintf(stderr, "timed out instead: %s\n", e.what());
      return 4;
    } catch (const CommError& e) {
      int rc = 0;
      for (const std::string& w : want) rc += expect_in(e.what(), w);
      return rc;
    }
  });
}

// A "rank 0" that proved the job secret but belongs to a job of another size: rank 1 fails at once
// with an error naming both sizes.
TEST(TcpBadHandshake, AnAuthenticatedPeerOfAnotherJobIsAnError) {
  auto codes =
      fake_rank_0_fails_start(hello_of(0, 1, 3), [](int) { return 0; }, {"bad handshake", "job of 3 ranks, not 2"});
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// A "rank 0" that proved the job secret sends a plausible eager frame (a real tag, its 16 bytes
// attached) before its hello: rank 1 refuses it at once naming rank 0, not after the start-up timeout.
TEST(TcpBadHandshake, AFrameBeforeTheHelloIsRefused) {
  auto send_eager = [](int fd) {
    struct {
      MessageHeader h = make_header(MessageKind::kEager, Tag{1, 0}, 16, 1);
      float payload[4] = {1, 2, 3, 4};
    } frame;
    return ::write(fd, &frame, sizeof(frame)) == sizeof(frame) ? 0 : 6;
  };
  auto codes =
      fake_rank_0_fails_start(hello_of(0, 1, 2), send_eager,
                              {"rank 0 failed during start-up", "a frame of kind 2 (16 bytes) before its hello"});
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Strangers at rank 1's listener before the real rank 0: garbage (a port scanner), a hello whose proof
// uses another secret (forged), a proof that was right for another connection's challenge (replayed),
// and a hello that never proves anything. Each is refused and logged, and the job starts regardless
// once the real rank 0 dials. Rank 1 and the real rank 0 hold one secret; the stranger does not.
class TcpStranger : public ::testing::TestWithParam<std::string> {};

TEST_P(TcpStranger, IsRefusedAndTheJobStillStarts) {
  const std::string mode = GetParam();
  const std::string secret = random_bytes(32), other = random_bytes(32);
  Job job = bind_job(2);
  int refused[2];  // the stranger tells the real rank 0 it is done (rank 1 closed its connection)
  ASSERT_EQ(::pipe(refused), 0);
  auto codes = run_processes(3, 30s, [&](int rank) {
    if (rank == 2) {  // the stranger, claiming to be rank 0
      ::close(refused[0]);
      const int fd = raw_connect(job.peers[1].port);
      if (fd < 0) return 5;
      int rc = 0;
      TcpHello reply{};
      if (mode == "garbage") {
        const std::string garbage = "GET / HTTP/1.1\r\nHost: fsdp\r\n\r\n" + std::string(100, 'x');
        rc = ::write(fd, garbage.data(), garbage.size()) == static_cast<ssize_t>(garbage.size()) ? 0 : 6;
      } else if (mode == "forged") {
        rc = dial_handshake(fd, hello_of(0, 1, 2), other, &reply);
      } else if (mode == "replayed") {
        // The proof a real rank 0 gave for some earlier challenge, replayed against a fresh one.
        TcpHello earlier = hello_of(0, 1, 2);
        earlier.nonce[0] ^= 1;
        rc = dial_handshake(fd, hello_of(0, 1, 2), secret, &reply, hello_transcript(earlier, reply));
      } else {  // "silent": a hello, then nothing
        TcpHello hello = hello_of(0, 1, 2);
        rc = ::write(fd, &hello, sizeof(hello)) == sizeof(hello) ? 0 : 6;
      }
      char byte;
      if (rc == 0 && mode != "silent" && ::recv(fd, &byte, 1, 0) > 0) rc = 7;  // refused: closed, nothing more
      ::write(refused[1], "r", 1);
      std::this_thread::sleep_for(200ms);
      ::close(fd);
      return rc;
    }
    if (rank == 0) {
      ::close(refused[1]);
      char byte;
      if (::read(refused[0], &byte, 1) != 1) return 9;
    }
    TcpOptions options;
    options.secret = secret;
    auto transport = make_tcp_transport(rank, 2, std::move(job.listeners[rank]), job.peers, 10s, options);
    job.listeners.clear();
    CommOptions o;
    o.timeout = 10s;
    auto comm = Communicator::create(transport, o);
    std::vector<float> x(16, static_cast<float>(rank + 1));
    comm->all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::sum()).wait();
    return x[0] == 3.0f && x[15] == 3.0f ? 0 : 10;
  });
  ::close(refused[0]);
  ::close(refused[1]);
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0})) << mode;
}

INSTANTIATE_TEST_SUITE_P(Modes, TcpStranger, ::testing::Values("garbage", "forged", "replayed", "silent"));

// Ranks holding different secrets never connect: the dialer refuses a listener that cannot prove its
// secret with an error that says so; the listener refuses the dialer and, at its timeout, says why.
TEST(TcpAuth, RanksWithDifferentSecretsRefuseEachOther) {
  Job job = bind_job(2);
  auto codes = run_processes(2, 30s, [&](int rank) {
    TcpOptions options;
    options.secret = random_bytes(32);  // each process its own
    try {
      make_tcp_transport(rank, 2, std::move(job.listeners[rank]), job.peers, 2s, options);
      return 2;
    } catch (const TimeoutError& e) {
      return rank == 1 ? expect_in(e.what(), "did not prove the job secret") : 3;
    } catch (const CommError& e) {
      return rank == 0 ? expect_in(e.what(), "could not prove the job secret") : 4;
    }
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// A fake rank 0 passes the connection handshake and the protocol's hello, waits until rank 1 is up,
// then sends a broken frame (the shared MessageHeader with one field spoiled): rank 1's pending
// receive fails with a clear error and nothing crashes.
class TcpMalformedFrame : public ::testing::TestWithParam<std::string> {};

TEST_P(TcpMalformedFrame, FailsTheReceiveClearly) {
  const std::string mode = GetParam();
  Job job = bind_job(2);
  int up[2];  // rank 1 writes a byte once its transport is up
  ASSERT_EQ(::pipe(up), 0);
  auto codes = run_processes(2, 30s, [&](int rank) {
    if (rank == 0) {
      ::close(up[1]);
      int fd = -1;
      for (int i = 0; i < 200 && fd < 0; ++i) fd = raw_connect(job.peers[1].port);
      TcpHello reply{};
      if (fd < 0) return 5;
      if (const int rc = dial_handshake(fd, hello_of(0, 1, 2), "", &reply); rc != 0) return rc;
      MessageHeader greeting = make_header(MessageKind::kHello, Tag{}, kProtocolVersion, 0);
      greeting.aux = 2;
      if (::write(fd, &greeting, sizeof(greeting)) != sizeof(greeting)) return 7;
      char byte = 0;
      if (::read(up[0], &byte, 1) != 1) return 8;
      MessageHeader h = make_header(MessageKind::kEager, Tag{1, 0}, 16, 1);
      if (mode == "bad_magic") h.magic = 0xdeadbeef;
      if (mode == "unknown_kind") h.kind = 77;
      if (mode == "absurd_size") h.bytes = 1ull << 50;
      if (::write(fd, &h, sizeof(h)) != sizeof(h)) return 9;
      std::this_thread::sleep_for(1s);
      ::close(fd);
      return 0;
    }
    ::close(up[0]);
    auto comm = join(job, 1, 2);
    if (::write(up[1], "u", 1) != 1) return 10;
    std::vector<float> buf(1000);
    try {
      comm->recv(buf.data(), buf.size(), DataType::kFloat32, 0).wait();
      return 2;
    } catch (const CommError& e) {
      const char* want = mode == "bad_magic"      ? "bad magic 0xdeadbeef"
                         : mode == "unknown_kind" ? "unknown frame kind 77"
                                                  : "eager frame of 1125899906842624 bytes";
      return expect_in(e.what(), "malformed frame from rank 0") + expect_in(e.what(), want);
    }
  });
  ::close(up[0]);
  ::close(up[1]);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, TcpMalformedFrame, ::testing::Values("bad_magic", "unknown_kind", "absurd_size"));

}  // namespace
}  // namespace fsdp::testing
