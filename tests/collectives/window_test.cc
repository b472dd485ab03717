// Shared-memory windows (collectives/window.h): every windowed collective against the reference, in
// place and out of place (the all-gather also into runs, against the rank-major one placed by hand), at 1-4 ranks as
// threads (inproc) and as processes (shm); mixed window and plain buffers falling back; a SIGKILLed peer named by the
// survivor; windows unmapped on abort and destroy, and nothing left in /dev/shm.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "collectives/transports/shm.h"
#include "collectives/kernels/stream_copy.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

int window_mappings() { return memfd_mappings("fsdp-window"); }

struct Checks {
  std::string failures;
  void expect(const std::string& diff, const std::string& what) {
    if (!diff.empty()) failures += what + ": " + diff + "\n";
  }
};

// Every rank's input for an all-gather block / a reduction, unique to rank and type.
std::vector<std::vector<std::byte>> inputs(DataType t, ReduceKind op, int n, size_t count) {
  std::vector<std::vector<std::byte>> in;
  for (int p = 0; p < n; ++p) in.push_back(make_input(t, op, p, count, p));
  return in;
}

// all_to_all_v's blocks in the suite: rank `from` sends rank `to` 0, 1 or 2 thirds of `count`
// elements (zero counts and skew), its send blocks laid out in reverse peer order (offsets matter),
// the receive blocks in peer order.
size_t v_count(int from, int to, size_t count) { return static_cast<size_t>((from + 2 * to) % 3) * (count / 3); }
std::vector<size_t> v_send_displs(int from, int n, size_t count) {
  std::vector<size_t> d(static_cast<size_t>(n));
  size_t at = 0;
  for (int q = n - 1; q >= 0; --q) {
    d[q] = at;
    at += v_count(from, q, count);
  }
  return d;
}

// One rank's all-to-alls (send in a window, recv plain): equal blocks, then per-pair blocks.
void all_to_all_suite(Communicator& comm, DataType t, size_t count, const std::function<std::byte*(size_t)>& buffer,
                      Checks& c, const std::string& tag) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t e = element_size(t);
  const auto in = inputs(t, ReduceKind::kSum, n, n * count);
  std::byte* send = buffer(n * count * e);
  std::memcpy(send, in[r].data(), n * count * e);
  std::vector<std::byte> out(n * count * e);
  comm.all_to_all(send, out.data(), count, t).wait();
  for (int p = 0; p < n; ++p) {
    c.expect(compare(out.data() + p * count * e, in[p].data() + r * count * e, count, t),
             "all_to_all block from " + std::to_string(p) + " " + tag);
  }
  std::vector<size_t> send_counts(n), recv_counts(n), recv_displs(n);
  const std::vector<size_t> send_displs = v_send_displs(r, n, count);
  size_t received = 0;
  for (int q = 0; q < n; ++q) {
    send_counts[q] = v_count(r, q, count);
    recv_counts[q] = v_count(q, r, count);
    recv_displs[q] = received;
    received += recv_counts[q];
  }
  std::vector<std::byte> got(std::max<size_t>(received, 1) * e);
  comm.all_to_all_v(send, send_counts, send_displs, got.data(), recv_counts, recv_displs, t).wait();
  for (int p = 0; p < n; ++p) {
    const size_t from = v_send_displs(p, n, count)[r];
    c.expect(compare(got.data() + recv_displs[p] * e, in[p].data() + from * e, recv_counts[p], t),
             "all_to_all_v block from " + std::to_string(p) + " " + tag);
  }
}

// One rank's share: all-gather, reduce-scatter and all-reduce of `t`, in place and out of place,
// with every buffer peers read in a window (`use_windows`; else plain vectors: the fallback).
void windowed_suite(Communicator& comm, DataType t, size_t count, bool use_windows, Checks& c) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t e = element_size(t);
  const std::string tag = std::string(name(t)) + " count " + std::to_string(count) + " rank " + std::to_string(r);
  // A buffer of `bytes`: a window, or plain memory for the mixed cases.
  std::vector<Window> windows;
  std::vector<std::vector<std::byte>> plain;
  auto buffer = [&](size_t bytes) -> std::byte* {
    Window w = comm.alloc_window(bytes);  // collective: every rank allocates alike
    if (use_windows) {
      windows.push_back(std::move(w));
      return windows.back().data<std::byte>();
    }
    plain.emplace_back(bytes);
    return plain.back().data();
  };

  {  // all-gather in place, then out of place (send in a window, recv plain)
    const auto in = inputs(t, ReduceKind::kSum, n, count);
    std::byte* full = buffer(n * count * e);
    std::memcpy(full + r * count * e, in[r].data(), count * e);
    comm.all_gather(full + r * count * e, full, count, t).wait();
    for (int p = 0; p < n; ++p) c.expect(compare(full + p * count * e, in[p].data(), count, t), "all_gather in place block " + std::to_string(p) + " " + tag);
    std::byte* shard = buffer(count * e);
    std::memcpy(shard, in[r].data(), count * e);
    std::vector<std::byte> out(n * count * e);
    comm.all_gather(shard, out.data(), count, t).wait();
    for (int p = 0; p < n; ++p) c.expect(compare(out.data() + p * count * e, in[p].data(), count, t), "all_gather out of place block " + std::to_string(p) + " " + tag);
    // Into runs (FSDP's copy-out): three tensors per block, the block's last element padding; tensor
    // B's last piece short, C's last rank's piece empty; a gap after each tensor that nothing writes.
    const size_t a = count / 3, b = count / 3, cc = count - a - b - 1;
    const std::vector<GatherRun> runs = {
        {.src = 0, .dst = 0, .per_rank = a * e, .total = a * e * n},
        {.src = (a + b) * e, .dst = (a * n + 1) * e, .per_rank = cc * e, .total = cc * e * (n - 1)},
        {.src = a * e, .dst = (a * n + 1 + cc * (n - 1) + 1) * e, .per_rank = b * e, .total = (b * n - b / 2) * e},
    };
    const size_t extent = runs[2].dst + runs[2].total + e;
    std::vector<std::byte> placed(extent, std::byte{0xAB}), want(extent, std::byte{0xAB});
    for (int p = 0; p < n; ++p) {
      for (const GatherRun& run : runs) {
        std::memcpy(want.data() + run.dst + p * run.per_rank, in[p].data() + run.src, run.piece(p));
      }
    }
    comm.all_gather_into_runs(shard, placed.data(), count, t, runs).wait();
    if (placed != want)
      c.failures += "all_gather_into_runs differs from the rank-major gather placed by hand " + tag + "\n";
  }
  {  // reduce-scatter out of place (recv plain), then in place
    const auto in = inputs(t, ReduceKind::kSum, n, n * count);
    const auto want = reference_reduce(t, ReduceOp::sum(), in, n * count);
    std::byte* send = buffer(n * count * e);
    std::memcpy(send, in[r].data(), n * count * e);
    std::vector<std::byte> out(count * e);
    comm.reduce_scatter(send, out.data(), count, t, ReduceOp::sum()).wait();
    c.expect(compare(out.data(), want.data() + r * count * e, count, t), "reduce_scatter out of place " + tag);
    comm.reduce_scatter(send, send + r * count * e, count, t, ReduceOp::sum()).wait();
    c.expect(compare(send + r * count * e, want.data() + r * count * e, count, t), "reduce_scatter in place " + tag);
  }
  {  // all-reduce in place, out of place (both windows), avg for floats; uneven blocks (count + 1)
    const size_t m = n * count + 1;
    const ReduceOp op = is_floating(t) ? ReduceOp{ReduceKind::kAvg, 1.0} : ReduceOp::sum();
    const auto in = inputs(t, op.kind, n, m);
    const auto want = reference_reduce(t, op, in, m);
    std::byte* buf = buffer(m * e);
    std::memcpy(buf, in[r].data(), m * e);
    comm.all_reduce(buf, buf, m, t, op).wait();
    c.expect(compare(buf, want.data(), m, t), "all_reduce in place " + tag);
    std::byte* send = buffer(m * e);
    std::byte* recv = buffer(m * e);
    std::memcpy(send, in[r].data(), m * e);
    comm.all_reduce(send, recv, m, t, op).wait();
    c.expect(compare(recv, want.data(), m, t), "all_reduce out of place " + tag);
  }
  all_to_all_suite(comm, t, count, buffer, c, tag);
}

// fp32 elements whose all-gather block spans two copy chunks (kWindowCopyChunkBytes) and ends inside a third.
constexpr size_t kChunksAndABit = (2 * kWindowCopyChunkBytes + 4 * 77) / sizeof(float) + 1;

// The suite over fp32, bf16 and int32 at two counts (one reduce chunk, several), and fp32 at a count
// whose all-gather blocks span several copy chunks and end inside one (kWindowCopyChunkBytes); checks
// that the windowed path ran exactly where every rank's buffers were windows. Throws with every failure.
void run_suite(Communicator& comm, bool mixed) {
  Checks c;
  const int n = comm.size();
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt32}) {
    for (size_t count : {size_t{1000}, size_t{9001}, kChunksAndABit}) {
      if (count == kChunksAndABit && t != DataType::kFloat32) continue;
      const uint64_t before = comm.windowed_collectives();
      // Mixed: rank 0 passes windows, the others plain memory: every rank must fall back.
      const bool use_windows = mixed ? comm.rank() == 0 : true;
      windowed_suite(comm, t, count, use_windows, c);
      const uint64_t ran = comm.windowed_collectives() - before;
      const uint64_t want = (mixed || n == 1) ? 0 : 9;
      if (ran != want) {
        c.failures += "rank " + std::to_string(comm.rank()) + ": " + std::to_string(ran) + " windowed collectives, expected " +
                      std::to_string(want) + "\n";
      }
    }
  }
  if (!c.failures.empty()) throw std::runtime_error(c.failures);
}

class WindowThreads : public ::testing::TestWithParam<int> {};

TEST_P(WindowThreads, EveryCollectiveMatchesReference) {
  InProcJob job(GetParam());
  job.run([](Communicator& comm) { run_suite(comm, false); });
}

TEST_P(WindowThreads, MixedWindowAndPlainBuffersFallBack) {
  InProcJob job(GetParam());
  job.run([](Communicator& comm) { run_suite(comm, true); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, WindowThreads, ::testing::Values(1, 2, 3, 4));

TEST(WindowThreads, WindowsAreSharedAndUnmappedOnAbortAndRelease) {
  const int n = 3;
  const int before = window_mappings();
  InProcJob job(n);
  std::vector<Window> windows(n);
  MemoryTracker tracker;
  job.run([&](Communicator& comm) {
    windows[comm.rank()] = comm.alloc_window(1 << 20, &tracker, MemoryCategory::kAllGather);
    if (!windows[comm.rank()].shared()) throw std::runtime_error(windows[comm.rank()].why_not_shared());
  });
  EXPECT_EQ(tracker.current(MemoryCategory::kAllGather), n << 20);
  // Each rank maps its own window and its n - 1 peers' (and the control block, n times).
  EXPECT_EQ(window_mappings() - before, n * n + n);
  for (int r = 0; r < n; ++r) job.comm(r).abort("test");
  EXPECT_EQ(window_mappings() - before, n);  // only the windows' own memory is left
  for (auto& w : windows) w.reset();
  EXPECT_EQ(window_mappings(), before);
  EXPECT_EQ(tracker.current(MemoryCategory::kAllGather), 0);
}

// Out of place, a rank copies its own block while the peers have not posted yet and the rest in step
// with the peers' blocks: with one rank late (each in turn), the early ones copy part or all of their
// own block before the windowed copies start; every block must still land once, whole.
TEST(WindowThreads, AllGatherOutOfPlaceWithALatePeer) {
  const int n = 3;
  const size_t count = kChunksAndABit;
  InProcJob job(n);
  for (int late = 0; late < n; ++late) {
    job.run([&](Communicator& comm) {
      const int r = comm.rank();
      Window shard = comm.alloc_window(count * sizeof(float));
      for (size_t i = 0; i < count; ++i) shard.data<float>()[i] = static_cast<float>(r * 1000003 + i);
      std::vector<float> out(n * count, -1.f);
      const uint64_t before = comm.windowed_collectives();
      if (r == late) std::this_thread::sleep_for(30ms);
      comm.all_gather(shard.data<float>(), out.data(), count, DataType::kFloat32).wait();
      if (comm.windowed_collectives() != before + 1) throw std::runtime_error("the windowed path did not run");
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) {
          if (out[p * count + i] != static_cast<float>(p * 1000003 + i)) {
            throw std::runtime_error("late rank " + std::to_string(late) + ": rank " + std::to_string(r) + " block " +
                                     std::to_string(p) + " element " + std::to_string(i));
          }
        }
      }
    });
  }
}

// --- processes over the shm transport ---


int process_body(const std::string& job, int rank, int n, bool mixed) {
  CommOptions o;
  o.timeout = 20s;
  o.flag_path_bytes = 0;  // count 1 would take the flag path (flag_path_test.cc), not the windows
  auto comm = Communicator::create(make_shm_transport(job, rank, n, 20s), o);
  try {
    run_suite(*comm, mixed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s", e.what());
    return 1;
  }
  comm.reset();
  return window_mappings() == 0 ? 0 : 2;  // everything released with the communicator and windows
}

class WindowProcesses : public ::testing::TestWithParam<int> {};

TEST_P(WindowProcesses, EveryCollectiveMatchesReferenceAndMixedFallsBack) {
  const int n = GetParam();
  for (bool mixed : {false, true}) {
    const std::string job = unique_job_name("window");
    auto codes = run_processes(n, 60s, [&](int rank) { return process_body(job, rank, n, mixed); });
    for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << (mixed ? " (mixed)" : "");
  }
  EXPECT_EQ(left_in_dev_shm("window"), std::set<std::string>{}) << "a segment was left in /dev/shm";
}

INSTANTIATE_TEST_SUITE_P(Ranks, WindowProcesses, ::testing::Values(1, 2, 3, 4));

// Rank 1 dies (SIGKILL) with its windows mapped: before the collective (`inside` false: rank 0 waits
// for its post), or inside it (rank 1 is already waiting in the collective when rank 0 kills it, so
// rank 0 copies rank 1's block and then waits for rank 1 to finish reading its own). Rank 0's windowed
// all-gather (or all-to-all) must fail within 5 s with PeerLostError naming rank 0, peer 1 and the
// collective, and nothing is left in /dev/shm.
struct KillCase {
  bool inside;
  const char* collective;  // "all_gather" or "all_to_all"
};

class WindowKilledPeer : public ::testing::TestWithParam<KillCase> {};

TEST_P(WindowKilledPeer, IsNamedBySurvivor) {
  const KillCase kc = GetParam();
  const bool inside = kc.inside;
  const std::string collective = kc.collective;
  const std::string job = unique_job_name("window");
  auto codes = run_processes(2, 30s, [&job, inside, &collective](int rank) {
    CommOptions o;
    o.timeout = 20s;
    auto comm = Communicator::create(make_shm_transport(job, rank, 2, 10s), o);
    const size_t count = 1 << 16;
    Window full = comm->alloc_window(2 * count * sizeof(float));
    std::vector<float> out(2 * count);
    int64_t pid = ::getpid();
    std::vector<int64_t> pids(2);
    comm->all_gather(&pid, pids.data(), 1, DataType::kInt64).wait();
    float* mine = full.data<float>() + rank * count;
    auto run = [&] {
      if (collective == "all_to_all") {
        comm->all_to_all(full.data(), out.data(), count, DataType::kFloat32).wait();
      } else {
        comm->all_gather(mine, full.data(), count, DataType::kFloat32).wait();
      }
    };
    if (rank == 1) {
      if (!inside) ::raise(SIGKILL);
      run();  // killed while waiting here
      return 5;
    }
    if (inside) {
      std::this_thread::sleep_for(200ms);  // rank 1 posts and waits (if slower, this is the other case)
      ::kill(static_cast<pid_t>(pids[1]), SIGKILL);
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      run();
      return 2;
    } catch (const PeerLostError& e) {
      const std::string what = e.what();
      if (!mentions_all(what, {"rank 0", "peer 1", collective})) return 3;
      return std::chrono::steady_clock::now() - start < 5s ? 0 : 4;
    }
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
  EXPECT_EQ(left_in_dev_shm("window"), std::set<std::string>{}) << "a segment was left in /dev/shm";
}

INSTANTIATE_TEST_SUITE_P(When, WindowKilledPeer,
                         ::testing::Values(KillCase{false, "all_gather"}, KillCase{true, "all_gather"},
                                           KillCase{false, "all_to_all"}, KillCase{true, "all_to_all"}),
                         [](const auto& info) {
                           return std::string(info.param.collective) + (info.param.inside ? "_inside" : "_before");
                         });

// all_to_all_v over windows where two ranks disagree on a pair's count: both fail with the
// message-passing path's error text, naming the sizes, and neither waits for the other.
TEST(WindowThreads, AllToAllVCountMismatchFailsBothRanks) {
  InProcJob job(2);
  std::vector<std::string> errors(2);
  job.run([&](Communicator& comm) {
    const int r = comm.rank();
    Window send = comm.alloc_window(16 * sizeof(float));
    std::vector<float> recv(16);
    std::vector<size_t> counts{4, 4}, displs{0, 8}, expect{4, 4};
    if (r == 1) expect[0] = 6;  // rank 0 sends it 4
    try {
      comm.all_to_all_v(send.data(), counts, displs, recv.data(), expect, displs, DataType::kFloat32).wait();
    } catch (const CommError& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("message size mismatch"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("16 bytes"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

}  // namespace
}  // namespace fsdp::testing
