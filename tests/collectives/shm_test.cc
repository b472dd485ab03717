// The shared-memory transport with real processes: each test forks its ranks, every rank checks its
// own results against the reference, and the parent collects exit codes within a deadline.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "collectives/transports/process_identity.h"
#include "collectives/transports/shm.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

// /proc/<pid>/stat as the peers' liveness checks read it: state and start time (field 22) against a
// plain split of the same file; a live child, a zombie, a reaped pid.
TEST(ProcessIdentity, ReadsStateAndStartTimeAndSeesExits) {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::vector<std::string> f{"pid", "comm"};
  for (std::string x; fields >> x;) f.push_back(x);
  char state = 0;
  uint64_t start_time = 0;
  ASSERT_TRUE(read_proc_stat(::getpid(), state, start_time));
  EXPECT_EQ(state, 'R');
  EXPECT_EQ(std::to_string(start_time), f.at(21));  // field 22, counted from 1
  EXPECT_EQ(ProcessIdentity::self().start_time, start_time);
  EXPECT_EQ(ProcessIdentity::self().gone(0), "");

  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  EXPECT_FALSE(process_exited(child));
  ::kill(child, SIGKILL);
  for (int i = 0; i < 500 && !process_exited(child); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(process_exited(child)) << "a killed child not yet reaped (a zombie) counts as exited";
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(process_exited(child)) << "a reaped pid";
  EXPECT_FALSE(read_proc_stat(child, state, start_time));
}

// One rank's share of the suite shared with the other multi-process transports (test_support.h).
int suite(int rank, int n, const std::string& job) {
  CommOptions o;
  o.timeout = 20s;
  o.chunk_bytes = 64 * 1024;
  auto comm = Communicator::create(make_shm_transport(job, rank, n, 20s), o);
  return run_collectives_suite(*comm, rank, n);
}

// (ranks, FSDP_SHM_COPY): both ways of moving large payloads, and the size-based choice between them.
class ShmProcesses : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(ShmProcesses, EveryCollectiveMatchesReference) {
  const auto& [n, mode] = GetParam();
  const std::string job = unique_job_name("test");
  auto codes = run_processes(n, 60s, [n, mode, &job](int rank) {
    ::setenv("FSDP_SHM_COPY", mode.c_str(), 1);  // rank 0 decides for the job
    // auto: 64 KiB chunks are pulled with cross-memory attach, shorter pieces staged, in one job.
    if (mode == "auto") ::setenv("FSDP_SHM_CMA_MIN_BYTES", "65536", 1);
    return suite(rank, n, job);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmProcesses,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values("auto", "staging", "cma")),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// Both sides of a size mismatch fail and name both ranks and sizes, whether the payload would have
// been staged or pulled (test_support.h has the scenario); a self-send goes through the loopback path.
class ShmSizeMismatch : public ::testing::TestWithParam<std::string> {};

TEST_P(ShmSizeMismatch, FailsBothSidesAndSelfSendWorks) {
  const std::string mode = GetParam();
  const std::string job = unique_job_name("test");
  auto codes = run_processes(2, 30s, [&](int rank) {
    ::setenv("FSDP_SHM_COPY", mode.c_str(), 1);
    return size_mismatch_scenario(*make_shm_transport(job, rank, 2, 10s));
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, ShmSizeMismatch, ::testing::Values("staging", "cma"));

// A rank that dies mid-job is reported as lost, by name, long before the timeout.
class ShmKilledPeer : public ::testing::TestWithParam<std::string> {};

TEST_P(ShmKilledPeer, IsReportedQuickly) {
  const std::string job = unique_job_name("test");
  auto codes = run_processes(2, 30s, [&job](int rank) {
    CommOptions o;
    o.timeout = 20s;
    auto comm = Communicator::create(make_shm_transport(job, rank, 2, 10s), o);
    return killed_peer_scenario(*comm, GetParam());
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Collectives, ShmKilledPeer, ::testing::Values("all_gather", "all_to_all"));

// A rank lost outside the group a collective runs in (HSDP: rank 3's shard and replica groups both miss
// rank 0): rank 2 waits in group {1, 2} on rank 1, alive but gone elsewhere (it never calls); after a
// second it looks at the whole world and fails naming rank 0, long before its 20 s timeout. The engine
// (a 256 KiB all-gather) and the flag path (an 8-byte all-reduce) alike.
TEST(ShmFaults, LossOutsideTheGroupFailsAWaitOnALivePeer) {
  for (const std::string collective : {"all_gather", "all_reduce"}) {
    const std::string job = unique_job_name("test");
    auto codes = run_processes(3, 30s, [&](int rank) {
      CommOptions o;
      o.timeout = 20s;
      auto world = Communicator::create(make_shm_transport(job, rank, 3, 10s), o);
      int64_t pid = ::getpid(), pids[3] = {0, 0, 0};
      world->all_gather(&pid, pids, 1, DataType::kInt64).wait();
      auto group = world->split(rank == 0 ? -1 : 0, rank);
      if (rank == 0) ::raise(SIGKILL);
      if (rank == 1) {
        std::this_thread::sleep_for(25s);  // alive, never calls; rank 2 kills it when done
        return 5;
      }
      std::vector<float> shard(1 << 16, 1.f), full(1 << 17);
      const auto start = std::chrono::steady_clock::now();
      int code = 0;
      try {
        if (collective == "all_gather") {
          group->all_gather(shard.data(), full.data(), shard.size(), DataType::kFloat32).wait();
        } else {
          group->all_reduce(shard.data(), shard.data(), 2, DataType::kFloat32, ReduceOp::sum()).wait();
        }
        code = 2;
      } catch (const PeerLostError& e) {
        code = mentions_all(e.what(), {"rank 0", collective}) ? 0 : 3;
        if (code == 0 && std::chrono::steady_clock::now() - start > 5s) code = 4;
      }
      ::kill(static_cast<pid_t>(pids[1]), SIGKILL);
      return code;
    });
    EXPECT_EQ(codes, (std::vector<int>{128 + SIGKILL, 128 + SIGKILL, 0})) << collective;
  }
}

// The ranks a shrink left out are no longer looked at: the survivors' collective waits on a slow live
// peer for over a second and completes, though the rank they shrank away from is dead.
TEST(ShmFaults, ShrunkAwayRankDoesNotFailTheSurvivors) {
  const std::string job = unique_job_name("test");
  auto codes = run_processes(3, 30s, [&](int rank) {
    CommOptions o;
    o.timeout = 20s;
    auto world = Communicator::create(make_shm_transport(job, rank, 3, 10s), o);
    world->barrier().wait();
    if (rank == 0) ::raise(SIGKILL);
    const int lost[] = {0};
    auto survivors = world->shrink(lost);
    if (rank == 1) std::this_thread::sleep_for(1500ms);  // rank 2 waits on it past the world check
    std::vector<float> x(1 << 16, 1.f);
    try {
      survivors->all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::sum()).wait();
    } catch (const CommError& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 2;
    }
    return x[0] == 2.f ? 0 : 3;
  });
  EXPECT_EQ(codes, (std::vector<int>{128 + SIGKILL, 0, 0}));
}

TEST(ShmFaults, RankThatNeverAttachesTimesOut) {
  const std::string job = unique_job_name("test");
  auto codes = run_processes(1, 30s, [&job](int) {
    try {
      make_shm_transport(job, 0, 2, 300ms);  // rank 1 never comes
      return 2;
    } catch (const TimeoutError& e) {
      return std::string(e.what()).find("ranks 1 never attached") != std::string::npos ? 0 : 3;
    }
  });
  EXPECT_EQ(codes[0], 0);
  // The failed start leaves no segment behind.
  EXPECT_NE(::access(("/dev/shm/fsdp-" + job).c_str(), F_OK), 0) << "/dev/shm/fsdp-" << job << " left behind";
}

}  // namespace
}  // namespace fsdp::testing
