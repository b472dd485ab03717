// The collective fingerprint check (FSDP_CHECK_COLLECTIVES): mismatched calls fail on every rank at
// once with both calls named, matching calls still give the reference results, and the exchange
// itself at world sizes up to 144.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/core/fingerprint.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

// A long timeout: a mismatch that slipped through would end as a TimeoutError, not a MismatchError.
CommOptions checked() {
  CommOptions o;
  o.timeout = 60s;
  o.check_collectives = true;
  return o;
}

// Runs `call` on every rank of an n-rank job and returns each rank's error text ("" if it passed).
// Every rank must fail with a MismatchError: anything else is a test failure.
std::vector<std::string> mismatch_texts(int n, const std::function<void(Communicator&)>& call) {
  InProcJob job(n, checked());
  std::vector<std::string> texts(n);
  std::mutex mu;
  job.run([&](Communicator& c) {
    try {
      call(c);
      ADD_FAILURE() << "rank " << c.rank() << ": the mismatch went unnoticed";
    } catch (const MismatchError& e) {
      std::lock_guard<std::mutex> lock(mu);
      texts[c.rank()] = e.what();
    }
  });
  return texts;
}

void expect_all_contain(const std::vector<std::string>& texts, const std::vector<std::string>& parts) {
  for (size_t r = 0; r < texts.size(); ++r) {
    for (const auto& p : parts) EXPECT_NE(texts[r].find(p), std::string::npos) << "rank " << r << ": " << texts[r];
  }
}

TEST(Fingerprint, CountMismatchNamesBothCallsOnEveryRank) {
  const auto texts = mismatch_texts(3, [](Communicator& c) {
    std::vector<float> buf(2 << 20);
    const size_t count = c.rank() == 2 ? (2 << 20) : (1 << 20);
    c.all_reduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::sum()).wait();
  });
  expect_all_contain(texts, {"collective mismatch", "rank 0 called all_reduce(count 1048576, float, sum) seq 0",
                             "rank 2 called all_reduce(count 2097152, float, sum) seq 0", "op all_reduce"});
}

TEST(Fingerprint, SameBytesOfAnotherTypeAreAMismatch) {
  // 1000 floats against 500 doubles: the same 4000 bytes, which the transport alone cannot tell apart.
  const auto texts = mismatch_texts(2, [](Communicator& c) {
    std::vector<double> buf(1000);
    if (c.rank() == 0) {
      c.all_reduce(buf.data(), buf.data(), 1000, DataType::kFloat32, ReduceOp::sum()).wait();
    } else {
      c.all_reduce(buf.data(), buf.data(), 500, DataType::kFloat64, ReduceOp::sum()).wait();
    }
  });
  expect_all_contain(texts, {"all_reduce(count 1000, float, sum)", "all_reduce(count 500, double, sum)"});
}

TEST(Fingerprint, ReduceOpRootAndCollectiveMismatches) {
  expect_all_contain(mismatch_texts(2,
                                    [](Communicator& c) {
                                      std::vector<float> buf(16);
                                      const ReduceOp op = c.rank() == 0 ? ReduceOp::sum() : ReduceOp{ReduceKind::kMax, 1.0};
                                      c.all_reduce(buf.data(), buf.data(), 16, DataType::kFloat32, op).wait();
                                    }),
                     {"float, sum)", "float, max)"});
  expect_all_contain(mismatch_texts(4,
                                    [](Communicator& c) {
                                      std::vector<int32_t> buf(8);
                                      c.broadcast(buf.data(), buf.data(), 8, DataType::kInt32, c.rank() == 3 ? 1 : 0)
                                          .wait();
                                    }),
                     {"broadcast(count 8, int32, root 0)", "rank 3 called broadcast(count 8, int32, root 1)"});
  // All-reduce of 8 floats against an all-gather of 4 per rank: the same receive size.
  expect_all_contain(mismatch_texts(2,
                                    [](Communicator& c) {
                                      std::vector<float> in(8), out(8);
                                      if (c.rank() == 0) {
                                        c.all_reduce(in.data(), out.data(), 8, DataType::kFloat32, ReduceOp::sum())
                                            .wait();
                                      } else {
                                        c.all_gather(in.data(), out.data(), 4, DataType::kFloat32).wait();
                                      }
                                    }),
                     {"rank 0 called all_reduce(count 8", "rank 1 called all_gather(count 4, float)"});
  expect_all_contain(mismatch_texts(2,
                                    [](Communicator& c) {
                                      std::vector<float> buf(4);
                                      if (c.rank() == 0) {
                                        c.barrier().wait();
                                      } else {
                                        c.reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::sum(), 0)
                                            .wait();
                                      }
                                    }),
                     {"barrier(count 0) seq 0", "reduce(count 4, float, sum, root 0) seq 0"});
}

// all_to_all_v's counts differ per rank by design, so its fingerprint holds the type only: skewed
// counts pass the check (the transport still compares each pair's sizes), another type does not.
TEST(Fingerprint, AllToAllVChecksTheTypeNotTheCounts) {
  InProcJob job(3, checked());
  job.run([](Communicator& c) {
    const int r = c.rank();
    std::vector<size_t> send_counts{0, 1, 2}, recv_counts(3, static_cast<size_t>(r)), displs{0, 4, 8};
    std::vector<int32_t> in(12, r), out(12, -1);
    c.all_to_all_v(in.data(), send_counts, displs, out.data(), recv_counts, displs, DataType::kInt32).wait();
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < r; ++k) EXPECT_EQ(out[displs[i] + k], i) << "rank " << r << " from " << i;
    }
  });
  expect_all_contain(mismatch_texts(2,
                                    [](Communicator& c) {
                                      std::vector<size_t> counts{2, 2}, displs{0, 2};
                                      std::vector<float> in(4), out(4);
                                      c.all_to_all_v(in.data(), counts, displs, out.data(), counts, displs,
                                                     c.rank() == 0 ? DataType::kFloat32 : DataType::kInt32)
                                          .wait();
                                    }),
                     {"rank 0 called all_to_all_v(count 0, float)", "rank 1 called all_to_all_v(count 0, int32)"});
}

TEST(Fingerprint, MatchingCallsGiveTheReferenceResults) {
  const std::vector<int> sizes = kUnderSanitizer ? std::vector<int>{1, 2, 3} : std::vector<int>{1, 2, 3, 4, 7};
  for (int n : sizes) {
    InProcJob job(n, checked());
    std::vector<int> codes(n, -1);
    job.run([&](Communicator& c) { codes[c.rank()] = run_collectives_suite(c, c.rank(), n); });
    for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << " of " << n;
  }
}

TEST(Fingerprint, ExchangeAtManyRanks) {
  for (int n : {16, 144}) {
    InProcJob job(n, checked());
    job.run([&](Communicator& c) {
      std::vector<float> buf(3, 1.0f);
      c.all_reduce(buf.data(), buf.data(), 3, DataType::kFloat32, ReduceOp::sum()).wait();
      EXPECT_EQ(buf[0], static_cast<float>(n));
      c.barrier().wait();
    });
    // One rank of 144 differs: every rank names it.
    const auto texts = mismatch_texts(n, [n](Communicator& c) {
      std::vector<float> buf(8);
      const size_t count = c.rank() == n - 1 ? 8 : 4;
      c.all_reduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::sum()).wait();
    });
    expect_all_contain(texts, {"rank " + std::to_string(n - 1) + " called all_reduce(count 8"});
  }
}

TEST(Fingerprint, DescribeNamesEveryField) {
  EXPECT_EQ(describe(Fingerprint::of(CollectiveKind::kReduce, 17, 1024, static_cast<int>(DataType::kBfloat16), 3,
                                     static_cast<int>(ReduceKind::kMax))),
            "reduce(count 1024, bfloat16, max, root 3) seq 17");
  Fingerprint garbage;
  garbage.op = 99;
  garbage.dtype = 77;
  EXPECT_EQ(describe(garbage), "unknown collective 99(count 0, dtype 77) seq 0");
  EXPECT_THROW(Fingerprint::of(collective_kind("gossip"), 0), std::logic_error);
}

TEST(Fingerprint, OffByDefaultAndSwitchedByTheKnob) {
  EXPECT_FALSE(CommOptions().check_collectives);
  // The knob itself is read (and cached) once per process: checked in a child process.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const ShellResult on = run_shell("FSDP_CHECK_COLLECTIVES=1 " + self + " --gtest_filter=Fingerprint.KnobChild");
  EXPECT_EQ(on.code, 0) << on.output;
}

TEST(Fingerprint, KnobChild) {
  const char* v = std::getenv("FSDP_CHECK_COLLECTIVES");
  if (!v) GTEST_SKIP() << "run by OffByDefaultAndSwitchedByTheKnob";
  EXPECT_TRUE(CommOptions::from_env().check_collectives);
}

}  // namespace
}  // namespace fsdp::testing
