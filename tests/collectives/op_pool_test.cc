// The engine path makes no heap call per collective once warm: Ops come back to their communicator's
// pool (collectives/core/op_pool.h), coroutine frames and request lists live in the Op's arena
// (op_arena.h), and transports take requests and list nodes from free lists (common/block_pool.h).
// This binary counts every operator new of the process (both ranks' threads, the progress engine's
// included) around steady-state collectives, and checks the pieces on their own.
#include "collectives/core/op_pool.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

#include "collectives/core/op_arena.h"
#include "collectives/core/task.h"
#include "collectives/transports/inproc.h"
#include "collectives/transports/shm.h"
#include "common/block_pool.h"
#include "tests/collectives/test_support.h"

namespace {
std::atomic<long> g_heap_calls{0};
}  // namespace

void* operator new(size_t bytes) {
  g_heap_calls.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

// Every collective the engine runs for FSDP, above the flag path's limit, once each. `a` holds
// `count` floats, `b` 2 * n * count.
void one_round(Communicator& comm, size_t count, float* a, float* b) {
  const size_t n = static_cast<size_t>(comm.size());
  comm.all_reduce(a, a, count, DataType::kFloat32, ReduceOp{}).wait();
  comm.all_gather(a, b, count, DataType::kFloat32).wait();
  // FSDP's gather into the parameters: three tensors of count/2, count/4 and count/4 floats per rank.
  const size_t quarter = count / 4 * sizeof(float);
  const std::array<GatherRun, 3> runs{GatherRun{0, 0, 2 * quarter, 2 * quarter * n},
                                      GatherRun{2 * quarter, 2 * quarter * n, quarter, quarter * n},
                                      GatherRun{3 * quarter, 3 * quarter * n, quarter, quarter * n}};
  comm.all_gather_into_runs(a, b, count, DataType::kFloat32, runs).wait();
  comm.reduce_scatter(b, a, count, DataType::kFloat32, ReduceOp{}).wait();
  comm.broadcast(a, a, count, DataType::kFloat32, 0).wait();
  comm.reduce(a, b, count, DataType::kFloat32, ReduceOp{}, 0).wait();
  comm.all_to_all(b, b + count * n, count, DataType::kFloat32).wait();
  comm.barrier().wait();
}

// Heap calls per round of one_round, measured over `rounds` after warming up.
double heap_calls_per_round(Communicator& comm, size_t count, int rounds, float* a, float* b) {
  for (int i = 0; i < 10; ++i) one_round(comm, count, a, b);
  const long before = g_heap_calls.load();
  for (int i = 0; i < rounds; ++i) one_round(comm, count, a, b);
  return static_cast<double>(g_heap_calls.load() - before) / rounds;
}

double heap_calls_per_round(Communicator& comm, size_t count, int rounds) {
  std::vector<float> a(count, 1.f), b(count * comm.size() * 2, 1.f);
  return heap_calls_per_round(comm, count, rounds, a.data(), b.data());
}

// A round is 8 collectives; before pooling each took 4-27 heap calls (Op, frames, requests, list nodes).
// The bound leaves room for rare events that do allocate (a message parked before its receive).
constexpr double kMaxPerRound = 0.5;

TEST(OpPool, SteadyStateCollectivesMakeNoHeapCallsAcrossProcesses) {
  for (bool checked : {false, true}) {
    const std::string job = unique_job_name("op-pool");
    auto codes = run_processes(2, 60s, [&](int rank) {
      CommOptions o;
      o.check_collectives = checked;  // with it, each collective runs a fingerprint all-gather first
      o.timeout = 20s;
      auto comm = Communicator::create(make_shm_transport(job, rank, 2, 20s), o);
      int bad = 0;
      auto check = [&](size_t count, double per_round, const char* where) {
        std::printf("rank %d, %s: %zu floats %s: %.2f heap calls per round of 8 collectives\n", rank,
                    checked ? "checked" : "unchecked", count, where, per_round);
        bad += per_round > kMaxPerRound;
      };
      for (size_t count : {size_t{2048}, size_t{16384}, size_t{262144}}) {
        check(count, heap_calls_per_round(*comm, count, 40), "in private memory");
      }
      // The windowed algorithms (every buffer in a shared window).
      const size_t count = 65536;
      Window a = comm->alloc_window(count * sizeof(float));
      Window b = comm->alloc_window(count * sizeof(float) * 4);
      check(count, heap_calls_per_round(*comm, count, 40, a.data<float>(), b.data<float>()), "in windows");
      return bad;
    });
    EXPECT_EQ(codes, (std::vector<int>{0, 0})) << (checked ? "with" : "without") << " FSDP_CHECK_COLLECTIVES";
  }
}

TEST(OpPool, SteadyStateCollectivesMakeNoHeapCallsAcrossThreads) {
  auto transports = make_inproc_transports(2);
  std::vector<double> per_round(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      CommOptions o;
      o.check_collectives = false;
      auto comm = Communicator::create(transports[r], o);
      per_round[r] = heap_calls_per_round(*comm, 16384, 40);
    });
  }
  for (auto& t : ranks) t.join();
  // Both ranks count the whole process: each figure covers both.
  EXPECT_LE(per_round[0], 2 * kMaxPerRound);
  EXPECT_LE(per_round[1], 2 * kMaxPerRound);
}

TEST(OpPool, AnOpHeldByAWorkIsNotReusedAndComesBackClean) {
  auto transports = make_inproc_transports(1);
  ScratchPool scratch;
  auto pool = OpPool::create(*transports[0], scratch);
  GroupView group{0, {0}, 7};
  OpPtr first = pool->acquire(ErrorContext{0, -1, "all_gather", 1, 64}, group, 1024, 1s);
  first->finish(std::make_exception_ptr(TimeoutError(first->context(), "test failure")));
  OpPtr second = pool->acquire(ErrorContext{0, -1, "reduce", 2, 8}, group, 1024, 1s);
  EXPECT_NE(first.get(), second.get());  // first is still held
  EXPECT_EQ(pool->created(), 2u);
  Op* raw = first.get();
  first.reset();  // back to the pool, recycled
  OpPtr third = pool->acquire(ErrorContext{0, -1, "barrier", 3, 0}, group, 1024, 1s);
  EXPECT_EQ(third.get(), raw);
  EXPECT_EQ(pool->created(), 2u);
  EXPECT_EQ(third->state(), Op::State::kPending);
  EXPECT_EQ(third->context().op, "barrier");
  EXPECT_EQ(third->context().seq, 3u);
  EXPECT_FALSE(third->started());
  EXPECT_EQ(third->first_pending(), nullptr);
}

TEST(OpPool, AnOpOutlivesItsPoolsOwner) {
  auto transports = make_inproc_transports(1);
  ScratchPool scratch;
  GroupView group{0, {0}, 7};
  OpPtr op;
  {
    auto pool = OpPool::create(*transports[0], scratch);
    op = pool->acquire(ErrorContext{0, -1, "all_reduce", 1, 4}, group, 1024, 1s);
  }
  // The pool lives on in the Op's deleter; dropping the Op recycles it there and then frees both.
  EXPECT_EQ(op->context().op, "all_reduce");
  op.reset();
}

// A coroutine whose first parameter is an Op takes its frame from the Op's arena.
Task nested(Op& op, int depth, int& ran) {
  ++ran;
  RequestList list = op.request_list();
  list.resize(static_cast<size_t>(depth) * 8);
  if (depth > 0) co_await nested(op, depth - 1, ran);
}

TEST(OpArena, FramesAndListsLiveInTheArenaAndGrowToTheHighWaterOnce) {
  auto transports = make_inproc_transports(1);
  ScratchPool scratch;
  auto pool = OpPool::create(*transports[0], scratch, 1);
  GroupView group{0, {0}, 7};
  auto run = [&](int depth) {
    OpPtr op = pool->acquire(ErrorContext{0, -1, "test", 1, 0}, group, 1024, 1s);
    int ran = 0;
    Task t = nested(*op, depth, ran);
    t.handle().resume();
    EXPECT_TRUE(t.done());
    EXPECT_EQ(ran, depth + 1);
    const size_t heap = op->arena().heap_allocations();
    return heap;
  };
  const size_t first = run(40);  // more than the first 4 KiB: part goes to the heap
  EXPECT_GT(first, 0u);
  const long before = g_heap_calls.load();
  const size_t second = run(40);  // the recycled arena grew to the first run's high water
  EXPECT_EQ(second, first);       // the count is cumulative: no new heap allocations
  EXPECT_EQ(g_heap_calls.load() - before, 0);
  EXPECT_EQ(pool->created(), 1u);
}

TEST(OpArena, LastInFirstOutFreesReuseTheSpace) {
  OpArena arena;
  void* a = arena.allocate(100, 16);
  void* b = arena.allocate(200, 16);
  arena.deallocate(b, 200, 16);
  void* c = arena.allocate(200, 16);
  EXPECT_EQ(b, c);  // popped, then carved again
  arena.deallocate(a, 100, 16);  // not the last: stays until reset
  void* d = arena.allocate(16, 16);
  EXPECT_NE(a, d);
  arena.reset();
  EXPECT_EQ(arena.allocate(100, 16), a);
  EXPECT_EQ(arena.heap_allocations(), 0u);
  void* big = arena.allocate(1 << 20, 16);  // beyond the buffer: heap
  EXPECT_EQ(arena.heap_allocations(), 1u);
  arena.deallocate(big, 1 << 20, 16);
}

// The buffer grows to the peak of what was live at once, not to everything that ever overflowed: a
// loop that overflows and frees a block a thousand times grows it once, by one block.
TEST(OpArena, GrowsToThePeakNotTheSumOfOverflows) {
  OpArena arena;
  void* base = arena.allocate(3000, 16);
  for (int i = 0; i < 1000; ++i) arena.deallocate(arena.allocate(2000, 16), 2000, 16);
  EXPECT_EQ(arena.heap_allocations(), 1000u);
  arena.deallocate(base, 3000, 16);
  arena.reset();
  EXPECT_EQ(arena.capacity(), 8192u);  // bit_ceil(3008 + 2000)
  base = arena.allocate(3000, 16);
  arena.deallocate(arena.allocate(2000, 16), 2000, 16);
  EXPECT_EQ(arena.heap_allocations(), 1000u);  // fits now
  // Zero bytes at a full buffer: an address inside it, returned to it (not to the heap).
  void* rest = arena.allocate(8192 - 3008, 16);
  void* none = arena.allocate(0, 16);
  arena.deallocate(none, 0, 16);
  arena.deallocate(rest, 8192 - 3008, 16);
  arena.deallocate(base, 3000, 16);
}

// Threads racing on one pool (a front end that lets them) take turns: never the same Op at once.
TEST(OpPool, ConcurrentAcquirersNeverShareAnOp) {
  auto transports = make_inproc_transports(1);
  ScratchPool scratch;
  auto pool = OpPool::create(*transports[0], scratch, 4);
  GroupView group{0, {0}, 7};
  std::atomic<int> shared{0};
  auto body = [&](const char* name) {
    for (int i = 0; i < 5000; ++i) {
      OpPtr op = pool->acquire(ErrorContext{0, -1, name, static_cast<uint64_t>(i), 0}, group, 1024, 1s);
      std::this_thread::yield();
      if (op->context().op != name || op->context().seq != static_cast<uint64_t>(i)) shared.fetch_add(1);
    }
  };
  std::thread a(body, "first"), b(body, "second");
  a.join();
  b.join();
  EXPECT_EQ(shared.load(), 0);
}

TEST(BlockPool, ReusesBlocksOfEachSizeAcrossThreads) {
  auto pool = std::make_shared<BlockPool>(BlockPool::Sharing::kFreedAnywhere);
  void* p = pool->allocate(64);
  void* q = pool->allocate(128);
  EXPECT_EQ(pool->heap_allocations(), 2u);
  std::thread([&] {
    pool->deallocate(p, 64);  // freed on another thread, reused on this one
    pool->deallocate(q, 128);
  }).join();
  EXPECT_EQ(pool->allocate(64), p);
  EXPECT_EQ(pool->allocate(128), q);
  EXPECT_EQ(pool->heap_allocations(), 2u);
  // Two more sizes take the last two classes; a fifth size goes to the heap every time.
  for (size_t bytes : {size_t{256}, size_t{512}}) pool->deallocate(pool->allocate(bytes), bytes);
  for (size_t bytes : {size_t{256}, size_t{512}}) pool->deallocate(pool->allocate(bytes), bytes);
  EXPECT_EQ(pool->heap_allocations(), 4u);
  pool->deallocate(pool->allocate(1024), 1024);
  pool->deallocate(pool->allocate(1024), 1024);
  EXPECT_EQ(pool->heap_allocations(), 6u);
  pool->deallocate(p, 64);
  pool->deallocate(q, 128);
}

// One thread allocates, two others free concurrently (what requests see: made under the engine's
// lock, dropped wherever their operation's last Work goes); blocks are reused, none lost (ASan, TSan).
// Batches: the allocator hands out 100 blocks, waits until both freers have returned them, and the
// next batch takes exactly those back, so only the first batch comes from the heap. The first batch is
// handed over once all of it is allocated: a block freed while it was still being allocated would be
// taken back at once, and fewer than 100 would come from the heap (seen under load). Later batches
// hand each block over as it is made, allocating while the freers return blocks.
TEST(BlockPool, OneAllocatorManyFreers) {
  auto pool = std::make_shared<BlockPool>(BlockPool::Sharing::kFreedAnywhere);
  constexpr int kBatch = 100, kBatches = 50;
  std::mutex mu;
  std::vector<void*> handed;
  std::atomic<int> freed{0};
  std::atomic<bool> done{false};
  auto freer = [&] {
    while (!done.load()) {
      void* p = nullptr;
      {
        std::lock_guard lock(mu);
        if (!handed.empty()) {
          p = handed.back();
          handed.pop_back();
        }
      }
      if (!p) {
        std::this_thread::yield();
        continue;
      }
      pool->deallocate(p, 72);
      freed.fetch_add(1);
    }
  };
  std::thread a(freer), b(freer);
  bool stalled = false;
  for (int k = 0; k < kBatches && !stalled; ++k) {
    std::vector<void*> first;  // the first batch, handed over whole
    for (int i = 0; i < kBatch; ++i) {
      void* p = pool->allocate(72);
      std::memset(p, i & 0xff, 72);  // a block handed out twice would be caught by ASan or TSan here
      if (k == 0) {
        first.push_back(p);
        continue;
      }
      std::lock_guard lock(mu);
      handed.push_back(p);
    }
    if (k == 0) {
      std::lock_guard lock(mu);
      handed = std::move(first);
    }
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (freed.load() < (k + 1) * kBatch && !(stalled = std::chrono::steady_clock::now() > deadline)) {
      std::this_thread::yield();
    }
  }
  done = true;
  a.join();
  b.join();
  ASSERT_FALSE(stalled) << "the freeing threads did not return a batch within 20 s";
  EXPECT_EQ(pool->heap_allocations(), static_cast<size_t>(kBatch));
}

TEST(BlockPool, PooledContainersKeepTheirNodes) {
  PooledDeque<int> queue{pooled<int>()};
  PooledList<std::string> list{pooled<std::string>()};
  auto churn = [&] {
    for (int i = 0; i < 2000; ++i) {
      queue.push_back(i);
      queue.pop_front();
      list.emplace_back();
      list.pop_front();
    }
  };
  churn();
  const long before = g_heap_calls.load();
  churn();
  EXPECT_EQ(g_heap_calls.load() - before, 0);
}

}  // namespace
}  // namespace fsdp::testing
