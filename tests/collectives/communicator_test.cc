// Communicator behaviour beyond the result matrix: sub-communicators (split, shrink), timeouts, aborts,
// a lost member, bad arguments, mismatched counts and large multi-chunk buffers.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>

#include "collectives/core/progress_engine.h"
#include "collectives/transports/inproc.h"
#include "collectives/transports/transport.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

CommOptions quick(std::chrono::milliseconds timeout = 20s) {
  CommOptions o;
  o.timeout = timeout;
  return o;
}

// A 2 x 4 mesh: rows (replicate groups) and columns (shard groups) all-reduce at the same time.
TEST(Split, MeshRowsAndColumnsRunConcurrently) {
  InProcJob job(8, quick());
  job.run([](Communicator& world) {
    const int r = world.rank();
    auto row = world.split(r / 4, r);     // 4 ranks each
    auto col = world.split(r % 4, -r);    // 2 ranks each, key reverses the order
    ASSERT_EQ(row->size(), 4);
    ASSERT_EQ(col->size(), 2);
    EXPECT_EQ(row->rank(), r % 4);
    EXPECT_EQ(col->rank(), r / 4 == 0 ? 1 : 0);
    EXPECT_EQ(row->global_rank(row->rank()), r);
    std::vector<float> a(4099, static_cast<float>(r)), b(4099, static_cast<float>(r * 10));
    Work wa = row->all_reduce(a.data(), a.data(), a.size(), DataType::kFloat32, ReduceOp::sum());
    Work wb = col->all_reduce(b.data(), b.data(), b.size(), DataType::kFloat32, ReduceOp::sum());
    wb.wait();
    wa.wait();
    const int row0 = r / 4 * 4;
    EXPECT_EQ(a[0], static_cast<float>(row0 * 4 + 6));             // row0 + (row0+1) + ... + (row0+3)
    EXPECT_EQ(b[4098], static_cast<float>(10 * (r % 4) * 2 + 40));  // 10*c + 10*(c+4)
  });
}

TEST(Split, NegativeColorGetsNullAndOthersStillWork) {
  InProcJob job(5, quick());
  job.run([](Communicator& world) {
    auto sub = world.split(world.rank() == 2 ? -1 : 0, 0);
    if (world.rank() == 2) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), 4);
    int64_t v = 1;
    sub->all_reduce(&v, &v, 1, DataType::kInt64, ReduceOp::sum()).wait();
    EXPECT_EQ(v, 4);
  });
}

// Ranks 2 and 3 destroy their sub-communicator while ranks 0 and 1 keep submitting on theirs (all on
// one engine). Destruction once took other streams' submissions out of the inbox and could lose the
// engine's wake-up, leaving ranks 0 and 1 waiting for ever; every wait here is bounded.
TEST(Split, DestroyingOneCommunicatorNeverStrandsAnotherOnTheSameEngine) {
  InProcJob job(4, quick());
  job.run([](Communicator& world) {
    constexpr int kComms = 300;
    std::vector<std::unique_ptr<Communicator>> pairs;
    for (int c = 0; c < kComms; ++c) pairs.push_back(world.split(world.rank() / 2, world.rank()));
    if (world.rank() >= 2) {
      for (auto& p : pairs) p.reset();  // each destruction races with ranks 0 and 1's submissions
      return;
    }
    for (int k = 0; k < 3 * kComms; ++k) {
      int32_t v = world.rank() + k;
      int32_t out[2] = {};
      Work w = pairs[k % kComms]->all_gather(&v, out, 1, DataType::kInt32);
      ASSERT_NO_THROW(w.wait(5s)) << "all-gather " << k << " stranded on the engine";
      ASSERT_EQ(out[1], 1 + k);
    }
  });
}

// Rank 1 never joins: rank 0 must fail within the timeout with an error naming everything.
TEST(Timeout, RankThatNeverJoinsIsNamed) {
  auto engine = std::make_shared<ProgressEngine>();
  auto t = make_inproc_transports(2);
  auto c0 = Communicator::create(t[0], quick(300ms), engine);
  auto c1 = Communicator::create(t[1], quick(300ms), engine);
  std::vector<float> shard(1024, 1.f), full(2048);
  const auto start = std::chrono::steady_clock::now();
  Work w = c0->all_gather(shard.data(), full.data(), shard.size(), DataType::kFloat32);
  try {
    w.wait();
    FAIL() << "all_gather completed without its peer";
  } catch (const TimeoutError& e) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_GE(elapsed, 300ms);
    EXPECT_LT(elapsed, 10s);  // only "no hang": a loaded CI machine may be seconds late
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
    EXPECT_NE(what.find("peer 1"), std::string::npos) << what;
    EXPECT_NE(what.find("all_gather"), std::string::npos) << what;
    EXPECT_NE(what.find("seq 0"), std::string::npos) << what;
    EXPECT_NE(what.find("4096 bytes"), std::string::npos) << what;
    EXPECT_EQ(e.context().peer, 1);
    EXPECT_EQ(e.context().op, "all_gather");
  }
  // The communicator is broken now: the next call fails at once, naming the first error.
  int64_t x = 0;
  EXPECT_THROW(c0->all_reduce(&x, &x, 1, DataType::kInt64, ReduceOp::sum()).wait(), AbortedError);
  c0->abort();
}

TEST(Timeout, WaitWithTimeoutGivesUpButOperationGoesOn) {
  auto engine = std::make_shared<ProgressEngine>();
  auto t = make_inproc_transports(2);
  auto c0 = Communicator::create(t[0], quick(), engine);
  auto c1 = Communicator::create(t[1], quick(), engine);
  int32_t a = 5, b = 7;
  Work w0 = c0->all_reduce(&a, &a, 1, DataType::kInt32, ReduceOp::sum());
  EXPECT_THROW(w0.wait(50ms), TimeoutError);
  EXPECT_FALSE(w0.test());
  Work w1 = c1->all_reduce(&b, &b, 1, DataType::kInt32, ReduceOp::sum());
  w0.wait();
  w1.wait();
  EXPECT_EQ(a, 12);
  EXPECT_EQ(b, 12);
}

TEST(Abort, InFlightOperationFailsAndDestroyDoesNotHang) {
  auto engine = std::make_shared<ProgressEngine>();
  auto t = make_inproc_transports(3);
  auto c0 = Communicator::create(t[0], quick(), engine);
  std::vector<double> buf(100000);
  Work w = c0->broadcast(buf.data(), buf.data(), buf.size(), DataType::kFloat64, 1);
  c0->abort("test abort");
  EXPECT_THROW(w.wait(), AbortedError);
  try {
    w.wait();
  } catch (const AbortedError& e) {
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos);
  }
  c0.reset();  // must return promptly
}

TEST(BadArguments, RejectedBeforeAnythingIsSent) {
  InProcJob job(2, quick());
  job.run([](Communicator& c) {
    std::vector<float> buf(16);
    float* p = buf.data();
    EXPECT_THROW(c.all_gather(nullptr, p, 4, DataType::kFloat32), InvalidArgument);
    EXPECT_THROW(c.all_reduce(p, nullptr, 4, DataType::kFloat32, ReduceOp::sum()), InvalidArgument);
    EXPECT_THROW(c.all_reduce(p, p + 1, 4, DataType::kFloat32, ReduceOp::sum()), InvalidArgument);  // overlap
    EXPECT_THROW(c.all_gather(p + 1, p, 4, DataType::kFloat32), InvalidArgument);  // not this rank's block
    EXPECT_THROW(c.reduce_scatter(p, p + 1, 4, DataType::kFloat32, ReduceOp::sum()), InvalidArgument);
    EXPECT_THROW(c.all_reduce(p, p, 4, static_cast<DataType>(42), ReduceOp::sum()), InvalidArgument);
    EXPECT_THROW(c.all_reduce(p, p, 4, DataType::kFloat32, ReduceOp{static_cast<ReduceKind>(9), 1}), InvalidArgument);
    EXPECT_THROW(c.all_reduce(p, p, 4, DataType::kInt32, ReduceOp::premul_sum(0.5)), InvalidArgument);
    EXPECT_THROW(c.broadcast(p, p, 4, DataType::kFloat32, 2), InvalidArgument);
    EXPECT_THROW(c.reduce(p, p, 4, DataType::kFloat32, ReduceOp::sum(), -1), InvalidArgument);
    EXPECT_THROW(c.send(p, 4, DataType::kFloat32, 5), InvalidArgument);
    EXPECT_THROW(c.all_reduce(p, p, SIZE_MAX / 2, DataType::kFloat32, ReduceOp::sum()), InvalidArgument);
    // all_gather_into_runs: blocks of 4 floats (16 bytes); each run refused names what is wrong.
    auto runs_refused = [&](std::vector<GatherRun> runs, const std::string& text, const float* send = nullptr) {
      try {
        c.all_gather_into_runs(send ? send : p, p + 8, 4, DataType::kFloat32, runs);
        ADD_FAILURE() << "accepted: " << text;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    runs_refused({}, "no runs");
    runs_refused({{.src = 0, .dst = 0, .per_rank = 6, .total = 12}}, "run 0 is not in whole float elements");
    runs_refused({{.src = 0, .dst = 0, .per_rank = 8, .total = 20}}, "run 0: 20 bytes do not fit 2 pieces of 8");
    runs_refused({{.src = 12, .dst = 0, .per_rank = 8, .total = 16}}, "runs past the 16-byte block");
    runs_refused({{.src = 0, .dst = 0, .per_rank = 8, .total = 16}, {.src = 8, .dst = 12, .per_rank = 8, .total = 16}},
                 "two runs write recv bytes 12..16");
    runs_refused({{.src = 0, .dst = SIZE_MAX - 7, .per_rank = 8, .total = 16}}, "run past the address space");
    // The same runs given in the other order (the check's sorted path; in order it takes one pass).
    runs_refused({{.src = 8, .dst = 12, .per_rank = 8, .total = 16}, {.src = 0, .dst = 0, .per_rank = 8, .total = 16}},
                 "two runs write recv bytes 12..16");
    runs_refused({{.src = 0, .dst = 0, .per_rank = 8, .total = 16}}, "send overlaps the recv bytes", p + 10);
    try {
      c.all_gather(nullptr, p, 4, DataType::kFloat32);
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("null send buffer"), std::string::npos) << e.what();
    }
    // Nothing was sent, so the communicator still works.
    int64_t v = 1;
    c.all_reduce(&v, &v, 1, DataType::kInt64, ReduceOp::sum()).wait();
    EXPECT_EQ(v, 2);
  });
}

TEST(BadArguments, CountsThatDisagreeAreDetected) {
  InProcJob job(2, quick(5s));
  job.run([](Communicator& c) {
    std::vector<float> buf(64);
    const size_t count = c.rank() == 0 ? 10 : 12;
    try {
      c.all_reduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::sum()).wait();
      ADD_FAILURE() << "mismatched counts went unnoticed";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("size mismatch"), std::string::npos) << e.what();
    }
  });
}

// Buffers of many default-sized chunks, at the sizes FSDP moves, through every large-message path.
TEST(LargeBuffers, MultiChunkRingsMatchReference) {
  // Under a sanitizer: 3 ranks at most and half the bytes (f32 still takes 2 chunks per ring step).
  const std::vector<int> sizes = kUnderSanitizer ? std::vector<int>{2, 3} : std::vector<int>{2, 3, 4};
  for (int n : sizes) {
    InProcJob job(n, quick());
    for (DataType t : {DataType::kFloat32, DataType::kBfloat16}) {
      const size_t count = (kUnderSanitizer ? (1u << 19) : (1u << 20)) + 17;  // 4 MiB of f32 per rank: 8+ chunks
      std::vector<std::vector<std::byte>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(make_input(t, ReduceKind::kSum, r, count));
      const std::vector<std::byte> want = reference_reduce(t, ReduceOp::sum(), inputs, count);
      job.run([&](Communicator& c) {
        std::vector<std::byte> buf = inputs[c.rank()];
        c.all_reduce(buf.data(), buf.data(), count, t, ReduceOp::sum()).wait();
        std::string diff = compare(buf.data(), want.data(), count, t);
        if (!diff.empty()) ADD_FAILURE() << "n " << n << " all_reduce: " << diff;
        const size_t block = count / n;
        std::vector<std::byte> shard(block * element_size(t));
        c.reduce_scatter(inputs[c.rank()].data(), shard.data(), block, t, ReduceOp::sum()).wait();
        std::vector<std::byte> full(block * n * element_size(t));
        c.all_gather(shard.data(), full.data(), block, t).wait();
        std::vector<std::vector<std::byte>> trimmed;
        for (int r = 0; r < n; ++r) {
          trimmed.emplace_back(inputs[r].begin(), inputs[r].begin() + block * n * element_size(t));
        }
        const std::vector<std::byte> want_rs = reference_reduce(t, ReduceOp::sum(), trimmed, block * n);
        diff = compare(full.data(), want_rs.data(), block * n, t);
        if (!diff.empty()) ADD_FAILURE() << "n " << n << " reduce_scatter + all_gather: " << diff;
      });
    }
  }
}

}  // namespace
}  // namespace fsdp::testing

namespace fsdp::testing {
namespace {

TEST(Options, EnvironmentOverridesDefaultsAndRejectsGarbage) {
  ::setenv("FSDP_TIMEOUT_SEC", "1.5", 1);
  ::setenv("FSDP_SMALL_MSG_BYTES", "0", 1);
  ::setenv("FSDP_ALGO", "all_reduce=ring", 1);
  CommOptions o = CommOptions::from_env();
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(o.small_message_bytes, 0u);
  EXPECT_EQ(o.algorithms, "all_reduce=ring");
  ::setenv("FSDP_TIMEOUT_SEC", "soon", 1);
  try {
    CommOptions::from_env();
    ADD_FAILURE() << "garbage accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("FSDP_TIMEOUT_SEC"), std::string::npos);
  }
  ::unsetenv("FSDP_TIMEOUT_SEC");
  ::unsetenv("FSDP_SMALL_MSG_BYTES");
  ::unsetenv("FSDP_ALGO");
}

TEST(Options, UnknownAlgorithmIsRejectedWithTheChoices) {
  CommOptions o;
  o.algorithms = "all_gather=telepathy";
  auto t = make_inproc_transports(1);
  try {
    Communicator::create(t[0], o);
    ADD_FAILURE() << "unknown algorithm accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bruck"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ring"), std::string::npos) << e.what();
  }
}

// --- shrink: the survivors, with no message to the excluded ranks; a lost member ----------------------

TEST(Shrink, SurvivorsRenumberedAndAloneWhileTheExcludedRankNeverCalls) {
  InProcJob job(5, quick());
  job.run([](Communicator& world) {
    const int r = world.rank();
    if (r == 1 || r == 3) return;  // excluded: they take part in nothing
    const int excluded[] = {3, 1};
    auto first = world.shrink(excluded);
    auto second = world.shrink(excluded);  // a second shrink has a context of its own
    ASSERT_EQ(first->size(), 3);
    EXPECT_EQ(first->rank(), r / 2);  // 0, 2, 4 -> 0, 1, 2
    EXPECT_EQ(first->global_rank(first->rank()), r);
    std::vector<float> a(4099, static_cast<float>(r)), b(33, static_cast<float>(10 * r));
    Work wb = second->all_reduce(b.data(), b.data(), b.size(), DataType::kFloat32, ReduceOp::sum());
    Work wa = first->all_reduce(a.data(), a.data(), a.size(), DataType::kFloat32, ReduceOp::sum());
    wa.wait();
    wb.wait();
    EXPECT_EQ(a[4098], 6.0f);
    EXPECT_EQ(b[0], 60.0f);
    std::vector<int32_t> mine(7, r), all(21, -1);
    first->all_gather(mine.data(), all.data(), mine.size(), DataType::kInt32).wait();
    for (int j = 0; j < 3; ++j) EXPECT_EQ(all[7 * j + 6], 2 * j);
  });
}

TEST(Shrink, BadSetsAreRefusedNamingTheEntry) {
  const int out[] = {4}, twice[] = {1, 1}, self[] = {0}, all[] = {0, 1, 2};
  EXPECT_THROW(shrink_survivors(3, 0, out), InvalidArgument);
  EXPECT_THROW(shrink_survivors(3, 0, twice), InvalidArgument);
  EXPECT_THROW(shrink_survivors(3, 0, self), InvalidArgument);
  try {
    shrink_survivors(3, 1, all);
    ADD_FAILURE() << "every rank excluded was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("every rank is excluded"), std::string::npos) << e.what();
  }
  EXPECT_EQ(shrink_survivors(4, 2, std::vector<int>{1}), (std::vector<int>{0, 2, 3}));
}

// Ranks 2 and 3 never post (as if frozen); rank 1 sends to rank 2 and waits on rank 0, both not known
// to be lost. Once rank 3 is declared lost on rank 1's transport (as the heartbeat does), rank 1's
// all-reduce fails within seconds naming it, and lost_peer() names it with nothing in flight.
TEST(Shrink, ACollectiveWaitingOnLivePeersFailsWhenAnotherMemberIsLost) {
  auto transports = make_inproc_transports(4);
  auto c0 = Communicator::create(transports[0], quick(60s));
  auto c1 = Communicator::create(transports[1], quick(60s));
  EXPECT_FALSE(c1->lost_peer().has_value());
  transports[1]->declare_peer_lost(3, "declared lost by the test");
  std::vector<float> x0(1 << 16, 1.0f), x1(1 << 16, 1.0f);  // a ring: rank 1 neighbours 0 and 2
  Work w0 = c0->all_reduce(x0.data(), x0.data(), x0.size(), DataType::kFloat32, ReduceOp::sum());
  const auto start = std::chrono::steady_clock::now();
  try {
    c1->all_reduce(x1.data(), x1.data(), x1.size(), DataType::kFloat32, ReduceOp::sum()).wait();
    ADD_FAILURE() << "the all-reduce completed without ranks 2 and 3";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("peer 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("declared lost by the test"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  auto lost = c1->lost_peer();
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(lost->rank, 3);
  c0->abort("the test is over");
  EXPECT_THROW(w0.wait(), CommError);
}

// As above, but the op times out (300 ms) before the engine ever looks at members it does not wait
// on (kMembersCheckAfter, 1 s), as when the engine thread was off the CPU past both: the deadline
// reports the lost member, never a TimeoutError naming the live peer rank 1 waits on.
TEST(Shrink, AnOpPastItsDeadlineNamesALostMemberRatherThanTimingOut) {
  auto transports = make_inproc_transports(4);
  auto c0 = Communicator::create(transports[0], quick(60s));
  auto c1 = Communicator::create(transports[1], quick(300ms));
  transports[1]->declare_peer_lost(3, "declared lost by the test");
  std::vector<float> x0(1 << 16, 1.0f), x1(1 << 16, 1.0f);  // a ring: rank 1 neighbours 0 and 2
  Work w0 = c0->all_reduce(x0.data(), x0.data(), x0.size(), DataType::kFloat32, ReduceOp::sum());
  try {
    c1->all_reduce(x1.data(), x1.data(), x1.size(), DataType::kFloat32, ReduceOp::sum()).wait();
    ADD_FAILURE() << "the all-reduce completed without ranks 2 and 3";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1, peer 3, op all_reduce"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("declared lost by the test"), std::string::npos) << e.what();
  } catch (const CommError& e) {
    ADD_FAILURE() << "not a PeerLostError: " << e.what();
  }
  c0->abort("the test is over");
  EXPECT_THROW(w0.wait(), CommError);
}

}  // namespace
}  // namespace fsdp::testing
