// The UCX transport with real processes on one host: forked ranks exchange worker addresses through
// a directory (what the rendezvous store does in a job) and each checks its own results. Every case
// runs under UCX_TLS=tcp and under a shared-memory set, chosen per case before any UCX call.
#include "collectives/transports/ucx.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "collectives/core/errors.h"
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

std::shared_ptr<Transport> join(const ExchangeDir& dir, int rank, int n) {
  return make_ucx_transport(rank, n, directory_exchange(dir.path, rank, n, 20s), 20s);
}

std::unique_ptr<Communicator> join_comm(const ExchangeDir& dir, int rank, int n) {
  CommOptions o;
  o.timeout = 20s;
  o.chunk_bytes = 64 * 1024;
  return Communicator::create(join(dir, rank, n), o);
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

}  // namespace
}  // namespace fsdp::testing
