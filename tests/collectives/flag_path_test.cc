// The flag path (collectives/flag_path.h): small collectives among processes over shm through
// flags and slots in a shared segment. Every collective it runs against the reference at 1-4
// processes, in place and out of place, every type and reduction; the path taken (and not taken:
// above FSDP_FLAG_PATH_BYTES, with it 0, over threads); a mismatch failing both ranks; a SIGKILLed
// peer and a peer that never comes named by the survivor within the bound; abort; Work::wait(ms);
// call order against the engine's operations; nothing left mapped or in /dev/shm.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "collectives/flag_path.h"
#include "collectives/core/flight_recorder.h"
#include "collectives/transports/shm.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

int flag_mappings() { return memfd_mappings("fsdp-flag-path"); }

int done_8_byte_all_reduces() {
  int done = 0;
  for (const FlightEntry& e : FlightRecorder::instance().snapshot()) {
    done += std::string(e.op) == "all_reduce" && e.bytes == 8 && e.state == FlightEntry::State::kDone;
  }
  return done;
}

std::unique_ptr<Communicator> join(const std::string& job, int rank, int n, CommOptions o = {}) {
  if (o.timeout == CommOptions().timeout) o.timeout = 20s;
  return Communicator::create(make_shm_transport(job, rank, n, 20s), o);
}

// Runs `body` as rank 0..n-1 in processes; an exception is printed and exits 1.
std::vector<int> in_processes(int n, const std::function<int(int)>& body) {
  return run_processes(n, 60s, [&](int rank) {
    try {
      return body(rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 1;
    }
  });
}

// Every collective the flag path runs, every type and reduction, counts up to the slot (1024 floats),
// in place and out of place, checked against the reference; returns the mismatches.
std::string run_suite(Communicator& comm, uint64_t& calls) {
  const int n = comm.size();
  const int r = comm.rank();
  std::string bad;
  auto expect = [&](const std::string& diff, const std::string& what) {
    if (!diff.empty()) bad += what + ": " + diff + "\n";
  };
  for (DataType t : all_data_types()) {
    const size_t elem = element_size(t);
    for (size_t count : {size_t{1}, size_t{7}, kFlagPayloadBytes / elem / static_cast<size_t>(std::max(n, 1))}) {
      const std::string where = std::string(name(t)) + " count " + std::to_string(count);
      for (ReduceOp op : all_reduce_ops()) {
        const std::string what = where + " " + std::string(name(op.kind));
        std::vector<std::vector<std::byte>> in(n);
        for (int p = 0; p < n; ++p) in[p] = make_input(t, op.kind, p, count);
        const auto want = reference_reduce(t, op, in, count);
        for (bool in_place : {false, true}) {
          std::vector<std::byte> buf = in[r], out(count * elem);
          void* dst = in_place ? buf.data() : out.data();
          comm.all_reduce(buf.data(), dst, count, t, op).wait(); ++calls;
          expect(compare(static_cast<std::byte*>(dst), want.data(), count, t), "all_reduce " + what);
        }
        std::vector<std::byte> root_out(count * elem);
        comm.reduce(in[r].data(), r == n - 1 ? root_out.data() : nullptr, count, t, op, n - 1).wait(); ++calls;
        if (r == n - 1) expect(compare(root_out.data(), want.data(), count, t), "reduce " + what);
        // reduce_scatter: rank p's input is the n blocks of `count` elements of input p (salted).
        std::vector<std::vector<std::byte>> rs_in(n);
        for (int p = 0; p < n; ++p) rs_in[p] = make_input(t, op.kind, p, count * n, 1);
        const auto rs_want = reference_reduce(t, op, rs_in, count * n);
        if (count * n * elem <= kFlagPayloadBytes) {
          std::vector<std::byte> rs_out(count * elem), rs_buf = rs_in[r];
          comm.reduce_scatter(rs_in[r].data(), rs_out.data(), count, t, op).wait(); ++calls;
          expect(compare(rs_out.data(), rs_want.data() + r * count * elem, count, t, r * count), "reduce_scatter " + what);
          comm.reduce_scatter(rs_buf.data(), rs_buf.data() + r * count * elem, count, t, op).wait(); ++calls;
          expect(compare(rs_buf.data() + r * count * elem, rs_want.data() + r * count * elem, count, t, r * count),
                 "reduce_scatter in place " + what);
        }
      }
      std::vector<std::vector<std::byte>> blocks(n);
      std::vector<std::byte> gathered;
      for (int p = 0; p < n; ++p) {
        blocks[p] = make_input(t, ReduceKind::kSum, p, count, 2);
        gathered.insert(gathered.end(), blocks[p].begin(), blocks[p].end());
      }
      std::vector<std::byte> full(count * elem * n), full2(count * elem * n);
      comm.all_gather(blocks[r].data(), full.data(), count, t).wait(); ++calls;
      expect(compare(full.data(), gathered.data(), count * n, t), "all_gather " + where);
      std::memcpy(full2.data() + r * count * elem, blocks[r].data(), count * elem);
      comm.all_gather(full2.data() + r * count * elem, full2.data(), count, t).wait(); ++calls;
      expect(compare(full2.data(), gathered.data(), count * n, t), "all_gather in place " + where);
      for (int root : {0, n - 1}) {
        std::vector<std::byte> b = r == root ? blocks[root] : std::vector<std::byte>(count * elem);
        std::vector<std::byte> b_out(count * elem);
        comm.broadcast(b.data(), b_out.data(), count, t, root).wait(); ++calls;
        expect(compare(b_out.data(), blocks[root].data(), count, t), "broadcast root " + std::to_string(root) + " " + where);
        comm.broadcast(b.data(), b.data(), count, t, root).wait(); ++calls;
        expect(compare(b.data(), blocks[root].data(), count, t), "broadcast in place " + where);
      }
    }
  }
  comm.barrier().wait(); ++calls;
  return bad;
}

class FlagPathProcesses : public ::testing::TestWithParam<int> {};

TEST_P(FlagPathProcesses, EveryCollectiveMatchesReferenceOnThePath) {
  const int n = GetParam();
  const std::string job = unique_job_name("flag");
  auto codes = in_processes(n, [&](int rank) {
    auto comm = join(job, rank, n);
    uint64_t calls = 0;
    const std::string bad = run_suite(*comm, calls);
    if (!bad.empty()) {
      std::fprintf(stderr, "rank %d:\n%s", rank, bad.c_str());
      return 1;
    }
    // Every collective above went the flag path (a single rank has no peers: the engine runs it).
    const uint64_t flagged = comm->flag_path_collectives();
    if (flagged != (n > 1 ? calls : 0)) {
      std::fprintf(stderr, "rank %d: %llu collectives on the flag path\n", rank, static_cast<unsigned long long>(flagged));
      return 2;
    }
    // One float above the slot takes the engine.
    std::vector<float> big(kFlagPayloadBytes / sizeof(float) + 1, 1.f);
    comm->all_reduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::sum()).wait();
    if (comm->flag_path_collectives() != flagged || big.back() != static_cast<float>(n)) return 3;
    comm.reset();
    return flag_mappings() == 0 ? 0 : 4;  // the segment went with the communicator
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_EQ(left_in_dev_shm("flag"), std::set<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Ranks, FlagPathProcesses, ::testing::Values(1, 2, 3, 4));

TEST(FlagPath, OffWithZeroBytesAndOverThreads) {
  const std::string job = unique_job_name("flag");
  auto codes = in_processes(2, [&](int rank) {
    CommOptions o;
    o.flag_path_bytes = 0;
    auto comm = join(job, rank, 2, o);
    double x = rank + 1.0;
    comm->all_reduce(&x, &x, 1, DataType::kFloat64, ReduceOp::sum()).wait();
    return x == 3.0 && comm->flag_path_collectives() == 0 ? 0 : 1;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
  // Ranks as threads of one process (one thread may drive several, as ncclCommInitAll's): the engine.
  InProcJob threads(2);
  threads.run([](Communicator& comm) {
    double x = comm.rank() + 1.0;
    comm.all_reduce(&x, &x, 1, DataType::kFloat64, ReduceOp::sum()).wait();
    EXPECT_EQ(x, 3.0);
    EXPECT_EQ(comm.flag_path_collectives(), 0u);
  });
}

// Ranks that call different collectives at one sequence number both fail with MismatchError naming
// both calls; the communicator is broken after it (the next operation fails at once).
TEST(FlagPath, MismatchFailsBothRanksAndBreaksTheCommunicator) {
  const std::string job = unique_job_name("flag");
  auto codes = in_processes(2, [&](int rank) {
    auto comm = join(job, rank, 2);
    float x[2] = {1, 2};
    try {
      comm->all_reduce(x, x, rank == 0 ? 2 : 1, DataType::kFloat32, ReduceOp::sum()).wait();
      return 2;
    } catch (const MismatchError& e) {
      if (!mentions_all(e.what(), {"all_reduce(count 2", "all_reduce(count 1"})) return 3;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->barrier().wait();
      return 4;
    } catch (const AbortedError& e) {
      if (std::string(e.what()).find("broken by an earlier error") == std::string::npos) return 5;
    }
    return std::chrono::steady_clock::now() - start < 2s ? 0 : 6;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Rank 1 dies (SIGKILL) before rank 0 calls, or while rank 0 waits for its post: rank 0's 8-byte all-reduce
// fails within 5 s with PeerLostError naming rank 0, peer 1 and the collective.
TEST(FlagPath, KilledPeerIsNamedBySurvivor) {
  for (bool inside : {false, true}) {
    const std::string job = unique_job_name("flag");
    auto codes = run_processes(2, 30s, [&](int rank) {
      auto comm = join(job, rank, 2);
      int64_t pid = ::getpid(), pids[2] = {0, 0};
      comm->all_gather(&pid, pids, 1, DataType::kInt64).wait();
      double x = 1;
      if (rank == 1) {
        if (!inside) ::raise(SIGKILL);
        std::this_thread::sleep_for(20s);  // killed by rank 0 while rank 0 waits for its post
        return 5;
      }
      std::thread killer;
      if (inside) {
        killer = std::thread([&] {
          std::this_thread::sleep_for(200ms);
          ::kill(static_cast<pid_t>(pids[1]), SIGKILL);
        });
      }
      struct Join {
        std::thread& t;
        ~Join() {
          if (t.joinable()) t.join();
        }
      } join_killer{killer};
      const auto start = std::chrono::steady_clock::now();
      try {
        comm->all_reduce(&x, &x, 1, DataType::kFloat64, ReduceOp::sum()).wait();
        return 2;
      } catch (const PeerLostError& e) {
        const std::string what = e.what();
        if (!mentions_all(what, {"rank 0", "peer 1", "all_reduce"})) return 3;
        return std::chrono::steady_clock::now() - start < 5s ? 0 : 4;
      }
    });
    EXPECT_EQ(codes[0], 0) << (inside ? "inside" : "before");
    EXPECT_EQ(codes[1], 128 + SIGKILL);
  }
  EXPECT_EQ(left_in_dev_shm("flag"), std::set<std::string>{});
}

// Counts on both sides of the limit: rank 0's all-reduce takes the flag path, rank 1's the engine.
// Rank 0 finds rank 1's call in its slot, rank 1 finds rank 0's post in rank 0's slot: both fail at
// once naming both (not after the 20 s timeout). tests/collectives/mismatch_test.cc has the rest.
TEST(FlagPath, MismatchAcrossTheLimitFailsAtOnce) {
  const std::string job = unique_job_name("flag");
  auto codes = in_processes(2, [&](int rank) {
    auto comm = join(job, rank, 2);
    comm->barrier().wait();  // the path is set up
    std::vector<float> x(rank == 0 ? 1000 : 2000, 1.f);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::sum()).wait();
      return 2;
    } catch (const MismatchError& e) {
      if (!mentions_all(e.what(), {"all_reduce(count 1000", "all_reduce(count 2000"})) return 3;
    } catch (const CommError& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 4;
    }
    return std::chrono::steady_clock::now() - start < 5s ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// A peer that never comes: TimeoutError naming it after the communicator's timeout; Work::wait(ms)
// gives up earlier without failing the operation; abort() from another thread ends a wait at once.
TEST(FlagPath, TimeoutGiveUpAndAbort) {
  const std::string job = unique_job_name("flag");
  auto codes = in_processes(2, [&](int rank) {
    CommOptions o;
    o.timeout = 1000ms;
    auto comm = join(job, rank, 2, o);
    double x = rank + 1.0;
    comm->all_reduce(&x, &x, 1, DataType::kFloat64, ReduceOp::sum()).wait();  // sets the path up
    if (rank == 1) {
      std::this_thread::sleep_for(300ms);  // rank 0 gives up on its first wait meanwhile
      comm->all_reduce(&x, &x, 1, DataType::kFloat64, ReduceOp::sum()).wait();
      std::this_thread::sleep_for(1500ms);  // never calls the next one: rank 0 times out
      return x == 6.0 ? 0 : 10;
    }
    Work late = comm->all_reduce(&x, &x, 1, DataType::kFloat64, ReduceOp::sum());
    try {
      late.wait(50ms);
      return 2;
    } catch (const TimeoutError& e) {
      if (std::string(e.what()).find("gave up") == std::string::npos) return 3;
    }
    late.wait();  // the operation went on
    if (x != 6.0) return 4;
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->all_reduce(&x, &x, 1, DataType::kFloat64, ReduceOp::sum()).wait();
      return 5;
    } catch (const TimeoutError& e) {
      if (!mentions_all(e.what(), {"peer 1", "all_reduce"})) return 6;
    }
    if (std::chrono::steady_clock::now() - start > 5s) return 7;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));

  const std::string job2 = unique_job_name("flag");
  codes = in_processes(2, [&](int rank) {
    auto comm = join(job2, rank, 2);
    comm->barrier().wait();
    if (rank == 1) {
      std::this_thread::sleep_for(1s);  // never posts, then exits
      return 0;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      comm->abort("stopped by the test");
    });
    const auto start = std::chrono::steady_clock::now();
    int code = 2;
    try {
      comm->barrier().wait();
    } catch (const AbortedError& e) {
      code = std::string(e.what()).find("stopped by the test") != std::string::npos ? 0 : 3;
    }
    aborter.join();
    return code == 0 && std::chrono::steady_clock::now() - start > 900ms ? 4 : code;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// The segment is set up by the first collective: where a peer never comes, that
// collective's Work fails (not the call), naming the call, the peer and the set-up.
TEST(FlagPath, SetUpFailureFailsTheFirstCallsWork) {
  const std::string job = unique_job_name("flag");
  auto codes = in_processes(2, [&](int rank) {
    CommOptions o;
    o.timeout = 300ms;
    auto comm = join(job, rank, 2, o);
    if (rank == 1) {
      std::this_thread::sleep_for(1s);  // never calls
      return 0;
    }
    float x[4] = {1, 2, 3, 4};
    Work w = comm->all_reduce(x, x, 4, DataType::kFloat32, ReduceOp::sum());
    try {
      w.wait();
      return 2;
    } catch (const TimeoutError& e) {
      const std::string what = e.what();
      if (!mentions_all(what, {"rank 0, peer 1, op all_reduce", "16 bytes", "setting up the flag path"})) return 3;
    }
    return comm->flag_path_collectives() == 0 ? 0 : 4;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Operations of one communicator complete in call order: a flag operation after an engine one
// completes after it, and one whose Work was dropped unwaited is complete (result written) before
// the next engine operation is submitted. Its flight recorder entry says done.
TEST(FlagPath, CallOrderWithTheEngine) {
  const std::string job = unique_job_name("flag");
  auto codes = in_processes(2, [&](int rank) {
    const int before = done_8_byte_all_reduces();
    auto comm = join(job, rank, 2);
    const size_t count = 1 << 18;  // 1 MiB blocks: the engine's ring
    std::vector<float> block(count, static_cast<float>(rank + 1)), full(2 * count);
    double x = rank + 1.0;
    Work gather = comm->all_gather(block.data(), full.data(), count, DataType::kFloat32);
    comm->all_reduce(&x, &x, 1, DataType::kFloat64, ReduceOp::sum()).wait();
    if (!gather.test() || x != 3.0 || full[count] != 2.f) return 2;
    double y = rank + 1.0;
    comm->all_reduce(&y, &y, 1, DataType::kFloat64, ReduceOp{ReduceKind::kMax, 1});  // dropped
    comm->all_gather(block.data(), full.data(), count, DataType::kFloat32).wait();
    if (y != 2.0) return 3;
    if (comm->flag_path_collectives() != 2) return 4;
    // The two flag operations and the path's set-up all-reduce (the forked ring may hold the parent's).
    return done_8_byte_all_reduces() - before == 3 ? 0 : 5;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace fsdp::testing
