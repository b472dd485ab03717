// The UCX transport with real processes on one host: forked ranks exchange worker addresses through
// a directory (what the rendezvous store does in a job) and each checks its own results. Every case
// runs under UCX_TLS=tcp and under a shared-memory set, chosen per case before any UCX call.
#include "collectives/transports/ucx.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "collectives/transports/message_header.h"
#include "collectives/transports/ucx_handshake.h"
#include "collectives/types/errors.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

// A fresh directory for one job's address files, removed at the end of the test.
struct ExchangeDir {
  std::string path;
  ExchangeDir() {
    path = (std::filesystem::temp_directory_path() / unique_job_name("fsdp-ucx-test")).string();
    std::filesystem::create_directories(path);
  }
  ~ExchangeDir() { std::filesystem::remove_all(path); }
};

// `secret`: the job secret every rank proves (empty: none, the default outside fsdp-run).
std::shared_ptr<Transport> join(const ExchangeDir& dir, int rank, int n, const std::string& secret = "",
                                std::chrono::milliseconds timeout = 20s) {
  UcxOptions options;
  options.secret = secret;
  return make_ucx_transport(rank, n, directory_exchange(dir.path, rank, n, timeout), timeout, options);
}

std::unique_ptr<Communicator> join_comm(const ExchangeDir& dir, int rank, int n, const std::string& secret = "") {
  CommOptions o;
  o.timeout = 20s;
  o.chunk_bytes = 64 * 1024;
  return Communicator::create(join(dir, rank, n, secret), o);
}

int expect_in(const std::string& what, const std::string& needle) {
  if (what.find(needle) != std::string::npos) return 0;
  std::fprintf(stderr, "expected '%s' in: %s\n", needle.c_str(), what.c_str());
  return 3;
}

// UCX reads UCX_TLS when a context is created, in the forked children; the parent sets it per case.
class WithTls {
 public:
  explicit WithTls(const std::string& tls) { ::setenv("UCX_TLS", tls.c_str(), 1); }
  ~WithTls() { ::unsetenv("UCX_TLS"); }
};

const std::vector<std::string> kTlsSets = {"tcp", "sm,self", "posix,cma,self"};

std::string tls_name(const std::string& tls) {
  std::string s = tls;
  for (char& c : s) {
    if (c == ',') c = '_';
  }
  return s;
}

// (ranks, UCX_TLS)
class UcxProcesses : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(UcxProcesses, EveryCollectiveMatchesReference) {
  const auto& [n, tls] = GetParam();
  WithTls with(tls);
  ExchangeDir dir;
  // A generous deadline: four ranks spinning on two cores take a minute under ThreadSanitizer.
  auto codes = run_processes(n, 100s, [&, n = n](int rank) {
    auto comm = join_comm(dir, rank, n);
    return run_collectives_suite(*comm, rank, n);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Every size over tcp and over shared memory; posix,cma,self (a subset of sm) at two ranks.
const auto kProcessCases =
    ::testing::Values(std::tuple<int, std::string>{1, "tcp"}, std::tuple<int, std::string>{2, "tcp"},
                      std::tuple<int, std::string>{3, "tcp"}, std::tuple<int, std::string>{4, "tcp"},
                      std::tuple<int, std::string>{1, "sm,self"}, std::tuple<int, std::string>{2, "sm,self"},
                      std::tuple<int, std::string>{3, "sm,self"}, std::tuple<int, std::string>{4, "sm,self"},
                      std::tuple<int, std::string>{2, "posix,cma,self"});

INSTANTIATE_TEST_SUITE_P(Ranks, UcxProcesses, kProcessCases, [](const auto& info) {
  return "n" + std::to_string(std::get<0>(info.param)) + "_" + tls_name(std::get<1>(info.param));
});

// The same suite with a job secret: every pair proves it, control messages carry session keys, data
// ids are masked (ucx_handshake.h). (ranks, UCX_TLS)
class UcxSecretProcesses : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(UcxSecretProcesses, EveryCollectiveMatchesReference) {
  const auto& [n, tls] = GetParam();
  WithTls with(tls);
  ExchangeDir dir;
  const std::string secret = random_bytes(32);
  auto codes = run_processes(n, 100s, [&, n = n](int rank) {
    auto comm = join_comm(dir, rank, n, secret);
    return run_collectives_suite(*comm, rank, n);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxSecretProcesses,
                         ::testing::Values(std::tuple<int, std::string>{2, "tcp"},
                                           std::tuple<int, std::string>{3, "tcp"},
                                           std::tuple<int, std::string>{3, "sm,self"}),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  tls_name(std::get<1>(info.param));
                         });

class UcxTransport : public ::testing::TestWithParam<std::string> {};

// Size mismatches at the transport (test_support.h has the scenario), a self-send, reuse afterwards.
TEST_P(UcxTransport, SizeMismatchAndSelfSend) {
  WithTls with(GetParam());
  ExchangeDir dir;
  auto codes = run_processes(2, 30s, [&](int rank) { return size_mismatch_scenario(*join(dir, rank, 2)); });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// Receives posted in one order and messages sent in another, equal tags in send order, and a
// cancelled receive that never completes: exact matching by the full 128-bit tag.
TEST_P(UcxTransport, MatchesByFullTagInSendOrder) {
  WithTls with(GetParam());
  ExchangeDir dir;
  auto codes = run_processes(2, 30s, [&](int rank) {
    auto transport = join(dir, rank, 2);
    const int other = 1 - rank;
    // Tags that agree in every low bit and differ only in the context's top bit and the op's.
    const Tag t1{0x8000000000000001ull, 5}, t2{0x0000000000000001ull, 5}, t3{0x1, 0x8000000000000005ull};
    const size_t big = 300000;  // rendezvous
    std::vector<std::vector<uint32_t>> bufs(5, std::vector<uint32_t>(big / 4));
    std::vector<RequestPtr> reqs;
    if (rank == 0) {
      const Tag order[] = {t3, t2, t1, t1, t2};
      for (int i = 0; i < 5; ++i) {
        std::fill(bufs[i].begin(), bufs[i].end(), 100 + i);
        const size_t bytes = i % 2 ? 64 : big;  // eager and rendezvous interleaved
        reqs.push_back(transport->isend(other, order[i], bufs[i].data(), bytes));
      }
    } else {
      // t1 twice (sent 3rd and 4th: rendezvous then eager), t2 twice (2nd eager, 5th rendezvous), t3 once.
      reqs.push_back(transport->irecv(other, t1, bufs[0].data(), big));
      reqs.push_back(transport->irecv(other, t2, bufs[1].data(), 64));
      auto dropped = transport->irecv(other, Tag{77, 77}, bufs[4].data(), 64);
      transport->cancel(dropped);
      reqs.push_back(transport->irecv(other, t3, bufs[2].data(), big));
      reqs.push_back(transport->irecv(other, t1, bufs[3].data(), 64));
      reqs.push_back(transport->irecv(other, t2, bufs[4].data(), big));
      if (!dropped->pending()) return 7;
    }
    const auto end = std::chrono::steady_clock::now() + 10s;
    for (const auto& r : reqs) {
      while (r->pending() && std::chrono::steady_clock::now() < end) transport->progress();
      if (!r->done()) return 2;
    }
    if (rank == 1) {
      const uint32_t want[] = {102, 101, 100, 103, 104};
      for (int i = 0; i < 5; ++i) {
        if (bufs[i][0] != want[i]) {
          std::fprintf(stderr, "receive %d got %u, want %u\n", i, bufs[i][0], want[i]);
          return 3;
        }
      }
    }
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// A rank that dies mid-job is reported as lost, by name, long before the timeout.
TEST_P(UcxTransport, KilledPeerIsReportedQuickly) {
  WithTls with(GetParam());
  ExchangeDir dir;
  auto codes = run_processes(2, 30s, [&](int rank) {
    auto comm = join_comm(dir, rank, 2);
    return killed_peer_scenario(*comm);
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxTransport, ::testing::ValuesIn(kTlsSets),
                         [](const auto& info) { return tls_name(info.param); });

TEST(UcxFaults, RankThatNeverStartsTimesOut) {
  ExchangeDir dir;
  auto codes = run_processes(2, 30s, [&](int rank) {  // rank 2 never publishes its address
    try {
      make_ucx_transport(rank, 3, directory_exchange(dir.path, rank, 3, 500ms), 500ms);
      return 2;
    } catch (const TimeoutError& e) {
      return expect_in(e.what(), "ranks 2 never published");
    }
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

TEST(UcxFaults, AddressOfAnotherJobIsRejected) {
  ExchangeDir dir;
  auto codes = run_processes(1, 30s, [&](int) {
    // Rank 0 of 2 sees a rank 1 "address" that is not one.
    auto fake = [](const std::string& mine) { return std::vector<std::string>{mine, "00ff00ff"}; };
    try {
      make_ucx_transport(0, 2, fake, 1s);
      return 2;
    } catch (const CommError& e) {
      return expect_in(e.what(), "is not a UCX transport address");
    }
  });
  EXPECT_EQ(codes[0], 0);
}

// A process that is no rank of the job but obtained a rank's published worker address: its own UCX
// worker, one endpoint to that address, and raw tagged messages claiming whatever it likes.
class Stranger {
 public:
  explicit Stranger(const std::string& published) {
    const std::vector<std::byte> blob = hex_decode(published);
    ucp_config_t* config = nullptr;
    ok_ = ucp_config_read(nullptr, nullptr, &config) == UCS_OK;
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ok_ = ok_ && ucp_init(&params, config, &context_) == UCS_OK;
    if (config) ucp_config_release(config);
    ucp_worker_params_t worker_params{};
    ok_ = ok_ && ucp_worker_create(context_, &worker_params, &worker_) == UCS_OK;
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(blob.data() + sizeof(UcxPeerInfo));
    ok_ = ok_ && blob.size() > sizeof(UcxPeerInfo) && ucp_ep_create(worker_, &ep_params, &ep_) == UCS_OK;
  }

  ~Stranger() {
    if (ep_) {
      ucp_request_param_t param{};
      wait(ucp_ep_close_nbx(ep_, &param));  // flushes what was sent
    }
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }

  bool ok() const { return ok_; }

  void send(uint64_t tag, const void* data, size_t bytes) {
    if (!ok_) return;
    ucp_request_param_t param{};
    ok_ = wait(ucp_tag_send_nbx(ep_, data, bytes, tag, &param));
  }
  void send(uint64_t tag, const std::string& bytes) { send(tag, bytes.data(), bytes.size()); }

  // Waits (bounded) until everything sent left this process.
  void flush() {
    if (!ok_) return;
    ucp_request_param_t param{};
    wait(ucp_ep_flush_nbx(ep_, &param));
  }

 private:
  // Progresses until `r` completes; rank 1 only takes the stranger's connection while it progresses.
  bool wait(ucs_status_ptr_t r) {
    if (r == nullptr) return true;
    if (UCS_PTR_IS_ERR(r)) return false;
    const auto end = std::chrono::steady_clock::now() + 10s;
    ucs_status_t status;
    while ((status = ucp_request_check_status(r)) == UCS_INPROGRESS && std::chrono::steady_clock::now() < end) {
      ucp_worker_progress(worker_);
    }
    if (status == UCS_INPROGRESS) ucp_request_cancel(worker_, r);
    ucp_request_free(r);
    return status == UCS_OK;
  }

  bool ok_ = false;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

std::string bytes_of(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// What the stranger sends to rank 1, claiming to be rank 0, by mode:
//   forged:   a hello, then a proof made with another secret
//   replayed: a hello, then a proof that was right for another challenge (the job's own secret)
//   silent:   a hello, then nothing
//   injected: protocol messages with no session key (eager messages for the tag rank 1 receives on)
//             and small messages under guessed data ids
//   garbage:  a 7-byte handshake message, a control message claiming rank 5 of 2, an unknown tag id
void play_stranger(Stranger& s, const std::string& mode, const std::string& secret) {
  const uint64_t handshake = ucx_control_tag(0, kUcxHandshakeId), control = ucx_control_tag(0, kUcxControlId);
  const RankHello hello = make_rank_hello(kUcxHelloMagic, kUcxVersion, 0, 1, 2, 0, 1, random_bytes(kAuthNonceBytes));
  RankHello other_challenge = hello;  // as rank 1 might have answered some earlier hello
  other_challenge.from_rank = 1;
  other_challenge.to_rank = 0;
  if (mode == "forged" || mode == "replayed" || mode == "silent") s.send(handshake, &hello, sizeof(hello));
  if (mode == "forged") {
    const Digest proof = auth_proof(random_bytes(32), kUcxDialLabel, hello_transcript(hello, other_challenge));
    s.send(handshake, proof.data(), proof.size());
  } else if (mode == "replayed") {
    const Digest proof = auth_proof(secret, kUcxDialLabel, hello_transcript(hello, other_challenge));
    s.send(handshake, proof.data(), proof.size());
  } else if (mode == "injected") {
    const std::vector<std::byte> poison(16, std::byte{0xEE});
    const MessageHeader h = make_header(MessageKind::kEager, Tag{7, 7}, poison.size(), 1);
    const std::string no_key(kUcxFrameKeyBytes, '\0');
    s.send(control, no_key + bytes_of(&h, sizeof(h)) + bytes_of(poison.data(), poison.size()));
    s.send(control, bytes_of(&h, sizeof(h)) + bytes_of(poison.data(), poison.size()));  // as without a secret
    for (uint64_t id = 1; id <= 8; ++id) s.send(ucx_data_tag(0, id), poison.data(), poison.size());
  } else if (mode == "garbage") {
    s.send(handshake, "garbage");
    s.send(ucx_control_tag(5, kUcxControlId), "from rank 5 of 2");
    s.send(ucx_control_tag(0, 77), "an unknown id");
  }
  s.flush();
}

// A stranger at rank 1's worker address while the job starts: whatever it sends is refused and
// logged, and the job starts and runs regardless. Rank 1 receives two eager messages and one
// rendezvous message under tags the stranger aims at, after the stranger flushed everything: an
// injected message that got through would fill one of them with 0xEE (or fail it on its size).
// Over shared memory the stranger's messages reach rank 1 before the real rank 0 even starts (the
// handshake meets them first); over tcp its connection needs rank 1's progress, so they arrive
// during or after the handshake. (mode, UCX_TLS)
class UcxStranger : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(UcxStranger, IsRefusedAndTheJobStillRuns) {
  const auto& [mode, tls] = GetParam();
  const bool stranger_first = tls != "tcp";
  WithTls with(tls);
  ExchangeDir dir;
  const std::string secret = random_bytes(32);
  int done[2];  // the stranger tells rank 0 it has flushed everything
  ASSERT_EQ(::pipe(done), 0);
  auto codes = run_processes(3, 30s, [&](int rank) {
    if (rank == 2) {
      ::close(done[0]);
      const std::string path = dir.path + "/1";
      const auto end = std::chrono::steady_clock::now() + 10s;
      while (!std::filesystem::exists(path) && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(1ms);
      std::ifstream in(path);
      const std::string published((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      int rc = 5;
      {
        Stranger s(published);
        play_stranger(s, mode, secret);
        rc = s.ok() ? 0 : 6;
      }
      const bool told = ::write(done[1], "d", 1) == 1;
      return told ? rc : 7;
    }
    ::close(done[1]);
    char byte;
    if (rank == 0 && stranger_first && ::read(done[0], &byte, 1) != 1) return 9;
    auto transport = join(dir, rank, 2, secret, 10s);
    const Tag eager_tag{7, 7}, big_tag{8, 8};
    std::vector<float> a(4, 0.0f), b(4, 0.0f), big(100000, 0.0f);
    std::vector<RequestPtr> reqs;
    if (rank == 0) {
      if (!stranger_first && ::read(done[0], &byte, 1) != 1) return 9;
      std::fill(a.begin(), a.end(), 1.0f);
      std::fill(b.begin(), b.end(), 2.0f);
      std::fill(big.begin(), big.end(), 3.0f);
      reqs = {transport->isend(1, eager_tag, a.data(), 16), transport->isend(1, eager_tag, b.data(), 16),
              transport->isend(1, big_tag, big.data(), big.size() * 4)};
    } else {
      reqs = {transport->irecv(0, eager_tag, a.data(), 16), transport->irecv(0, eager_tag, b.data(), 16),
              transport->irecv(0, big_tag, big.data(), big.size() * 4)};
    }
    const auto end = std::chrono::steady_clock::now() + 10s;
    for (const auto& r : reqs) {
      while (r->pending() && std::chrono::steady_clock::now() < end) transport->progress();
      if (!r->done()) return 2;
    }
    if (rank == 1 && (a[0] != 1.0f || a[3] != 1.0f || b[0] != 2.0f || big[0] != 3.0f || big.back() != 3.0f)) {
      std::fprintf(stderr, "rank 1 received %g %g %g: injected?\n", a[0], b[0], big[0]);
      return 3;
    }
    return 0;
  });
  ::close(done[0]);
  ::close(done[1]);
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0})) << mode;
}

INSTANTIATE_TEST_SUITE_P(Modes, UcxStranger,
                         ::testing::Combine(::testing::Values("forged", "replayed", "silent", "injected", "garbage"),
                                            ::testing::Values("tcp", "sm,self")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + tls_name(std::get<1>(info.param));
                         });

// Ranks holding different secrets never connect: rank 0 refuses rank 1's reply and, at its timeout,
// says rank 1 did not prove the secret and why the last message was refused. Rank 1 waits longer, so
// it times out too or sees rank 0 go first; either way its error names rank 0.
TEST(UcxAuth, RanksWithDifferentSecretsRefuseEachOther) {
  WithTls with("tcp");
  ExchangeDir dir;
  auto codes = run_processes(2, 30s, [&](int rank) {
    try {
      join(dir, rank, 2, random_bytes(32), rank == 0 ? 2s : 4s);  // each process its own secret
      return 2;
    } catch (const TimeoutError& e) {
      return rank == 0 ? expect_in(e.what(), "ranks 1 did not prove the job secret") +
                             expect_in(e.what(), "claiming rank 1: a reply that could not prove the job secret")
                       : expect_in(e.what(), "ranks 0 did not prove the job secret");
    } catch (const CommError& e) {
      return rank == 1 ? expect_in(e.what(), "rank 0 failed during the job-secret handshake") : 3;
    }
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// One rank with a secret, one without: the one with it never admits the other, which times out too
// or sees it go first.
TEST(UcxAuth, ASecretOnOneRankOnlyIsRefused) {
  WithTls with("tcp");
  ExchangeDir dir;
  auto codes = run_processes(2, 30s, [&](int rank) {
    try {
      join(dir, rank, 2, rank == 0 ? random_bytes(32) : "", rank == 0 ? 2s : 4s);
      return 2;
    } catch (const TimeoutError& e) {
      return expect_in(e.what(), rank == 0 ? "ranks 1 did not prove the job secret" : "ranks 0 never answered");
    } catch (const CommError& e) {
      return rank == 1 ? expect_in(e.what(), "rank 0 failed during start-up") : 3;
    }
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

// Not a test: the connect latency the handshake adds (address exchange through a directory, the
// handshake, the protocol's hellos). Two ranks connect kRepeats times without and kRepeats times with
// a secret, interleaved; rank 0 prints the medians (docs/architecture.md quotes them). Run with
//   build/tests/ucx_test --gtest_also_run_disabled_tests --gtest_filter='*ConnectLatency*'
TEST(UcxAuth, DISABLED_ConnectLatency) {
  constexpr int kRepeats = 21;
  for (const std::string tls : {"tcp", "sm,self"}) {
    WithTls with(tls);
    std::vector<ExchangeDir> dirs(2 * kRepeats);
    auto codes = run_processes(2, 120s, [&](int rank) {
      std::vector<double> ms[2];
      for (int i = 0; i < 2 * kRepeats; ++i) {
        const bool with_secret = i % 2 == 1;
        UcxOptions options;
        options.secret = with_secret ? std::string(32, 'k') : "";
        const auto t0 = std::chrono::steady_clock::now();
        auto t = make_ucx_transport(rank, 2, directory_exchange(dirs[i].path, rank, 2, 10s), 10s, options);
        ms[with_secret].push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        // Both ranks connected before either tears down.
        auto r = rank == 0 ? t->isend(1, Tag{1, 1}, nullptr, 0) : t->irecv(0, Tag{1, 1}, nullptr, 0);
        while (r->pending()) t->progress();
      }
      if (rank == 0) {
        for (auto& v : ms) std::sort(v.begin(), v.end());
        const double without = ms[0][kRepeats / 2], with = ms[1][kRepeats / 2];
        std::printf("UCX_TLS=%s connect (2 ranks, median of %d): without secret %.2f ms, with %.2f ms, ratio %.2f\n",
                    tls.c_str(), kRepeats, without, with, with / without);
      }
      return 0;
    });
    EXPECT_EQ(codes[0], 0);
    EXPECT_EQ(codes[1], 0);
  }
}

}  // namespace
}  // namespace fsdp::testing
