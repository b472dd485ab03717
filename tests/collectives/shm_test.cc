// The shared-memory transport with real processes: each test forks its ranks, every rank checks its
// own results against the reference, and the parent collects exit codes within a deadline.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "collectives/transports/shm.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

// Forks n ranks running body(rank, job) (its return value is the exit code) and returns their exit
// codes; a rank still running at the deadline is killed and reported as -1.
std::vector<int> run_processes(int n, std::chrono::seconds deadline, const std::function<int(int, const std::string&)>& body) {
  static int counter = 0;
  const std::string job = "test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 99;
      try {
        rc = body(r, job);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stderr);
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(n, -1);
  const auto end = std::chrono::steady_clock::now() + deadline;
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < end) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] == 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[r] = 0;
        --left;
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  for (int r = 0; r < n; ++r) {
    if (pids[r] == 0) continue;
    ::kill(pids[r], SIGKILL);
    ::waitpid(pids[r], nullptr, 0);
  }
  return codes;
}

int check(const std::string& what, const std::string& diff) {
  if (diff.empty()) return 0;
  std::fprintf(stderr, "%s: %s\n", what.c_str(), diff.c_str());
  return 1;
}

// One rank's share of a small suite: every collective, a few types, small and multi-chunk sizes.
int suite(int rank, int n, const std::string& job) {
  CommOptions o;
  o.timeout = 20s;
  o.chunk_bytes = 64 * 1024;
  auto comm = Communicator::create(make_shm_transport(job, rank, n, 20s), o);
  int bad = 0;
  for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
    for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt32}) {
      const std::string tag = std::string(name(t)) + " count " + std::to_string(count);
      const size_t elem = element_size(t);
      std::vector<std::vector<std::byte>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(make_input(t, ReduceKind::kSum, r, count * n));
      const auto want = reference_reduce(t, ReduceOp::sum(), inputs, count * n);
      const auto& mine = inputs[rank];

      std::vector<std::byte> out(count * n * elem);
      comm->all_reduce(mine.data(), out.data(), count * n, t, ReduceOp::sum()).wait();
      bad += check("all_reduce " + tag, compare(out.data(), want.data(), count * n, t));

      std::vector<std::byte> shard(count * elem);
      comm->reduce_scatter(mine.data(), shard.data(), count, t, ReduceOp::sum()).wait();
      bad += check("reduce_scatter " + tag, compare(shard.data(), want.data() + rank * count * elem, count, t));

      comm->all_gather(mine.data(), out.data(), count, t).wait();
      std::vector<std::byte> gathered;
      for (int r = 0; r < n; ++r) gathered.insert(gathered.end(), inputs[r].begin(), inputs[r].begin() + count * elem);
      bad += check("all_gather " + tag, compare(out.data(), gathered.data(), count * n, t));

      const int root = static_cast<int>(count % n);
      std::vector<std::byte> b = rank == root ? inputs[root] : std::vector<std::byte>(count * n * elem);
      comm->broadcast(b.data(), b.data(), count * n, t, root).wait();
      bad += check("broadcast " + tag, compare(b.data(), inputs[root].data(), count * n, t));

      std::vector<std::byte> red(count * n * elem);
      comm->reduce(mine.data(), red.data(), count * n, t, ReduceOp::sum(), root).wait();
      if (rank == root) bad += check("reduce " + tag, compare(red.data(), want.data(), count * n, t));

      std::vector<std::byte> got(count * elem);
      Work s = comm->send(mine.data(), count, t, (rank + 1) % n);
      Work v = comm->recv(got.data(), count, t, (rank - 1 + n) % n);
      s.wait();
      v.wait();
      bad += check("send/recv " + tag, compare(got.data(), inputs[(rank - 1 + n) % n].data(), count, t));
      comm->barrier().wait();
    }
  }
  return bad == 0 ? 0 : 1;
}

// (ranks, FSDP_SHM_COPY): both ways of moving large payloads.
class ShmProcesses : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(ShmProcesses, EveryCollectiveMatchesReference) {
  const auto& [n, mode] = GetParam();
  auto codes = run_processes(n, 60s, [n, mode](int rank, const std::string& job) {
    ::setenv("FSDP_SHM_COPY", mode.c_str(), 1);  // rank 0 decides for the job
    return suite(rank, n, job);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmProcesses,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values("staging", "cma")),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// A rank that dies mid-job is reported as lost, by name, long before the timeout.
TEST(ShmFaults, KilledPeerIsReportedQuickly) {
  auto codes = run_processes(2, 30s, [](int rank, const std::string& job) {
    CommOptions o;
    o.timeout = 20s;
    auto comm = Communicator::create(make_shm_transport(job, rank, 2, 10s), o);
    comm->barrier().wait();
    if (rank == 1) ::raise(SIGKILL);
    std::vector<float> shard(1 << 16, 1.f), full(1 << 17);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->all_gather(shard.data(), full.data(), shard.size(), DataType::kFloat32).wait();
      return 2;
    } catch (const PeerLostError& e) {
      const auto elapsed = std::chrono::steady_clock::now() - start;
      const std::string what = e.what();
      if (what.find("peer 1") == std::string::npos || what.find("all_gather") == std::string::npos) {
        std::fprintf(stderr, "unexpected message: %s\n", what.c_str());
        return 3;
      }
      return elapsed < 5s ? 0 : 4;
    }
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

TEST(ShmFaults, RankThatNeverAttachesTimesOut) {
  auto codes = run_processes(1, 30s, [](int, const std::string& job) {
    try {
      make_shm_transport(job, 0, 2, 300ms);  // rank 1 never comes
      return 2;
    } catch (const TimeoutError& e) {
      return std::string(e.what()).find("ranks 1 never attached") != std::string::npos ? 0 : 3;
    }
  });
  EXPECT_EQ(codes[0], 0);
}

}  // namespace
}  // namespace fsdp::testing
