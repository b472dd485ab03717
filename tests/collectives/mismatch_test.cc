// Ranks that pass different calls at one sequence number, where one rank's call takes the flag path
// and the other's the engine (a count across the flag path's limit, a dtype whose bytes cross it, an
// all-gather count), and where both take the engine with different counts: with FSDP_CHECK_COLLECTIVES
// on and off, at the communicator's first collective (the flag path's set-up) and after it, both
// ranks fail at once with MismatchError naming both user calls (never the set-up's internal
// exchanges). Where no shared segment can tell (ranks as threads), the timeout says what may have
// happened.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "collectives/transports/shm.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

using Call = std::function<Work(Communicator&, std::vector<std::byte>&, std::vector<std::byte>&)>;

struct Mismatch {
  std::string name;
  Call rank0, rank1;
  std::string said0, said1;  // how each call is described
};

std::vector<Mismatch> mismatches() {
  auto all_reduce = [](size_t count, DataType t) -> Call {
    return [=](Communicator& c, auto& a, auto&) { return c.all_reduce(a.data(), a.data(), count, t, ReduceOp::sum()); };
  };
  auto all_gather = [](size_t count) -> Call {
    return
        [=](Communicator& c, auto& a, auto& b) { return c.all_gather(a.data(), b.data(), count, DataType::kFloat32); };
  };
  return {
      {"count across the limit", all_reduce(1000, DataType::kFloat32), all_reduce(2000, DataType::kFloat32),
       "all_reduce(count 1000, float, sum)", "all_reduce(count 2000, float, sum)"},
      {"dtype across the limit", all_reduce(1000, DataType::kFloat32), all_reduce(1000, DataType::kFloat64),
       "all_reduce(count 1000, float, sum)", "all_reduce(count 1000, double, sum)"},
      {"all-gather count", all_gather(500), all_gather(1000), "all_gather(count 500, float)",
       "all_gather(count 1000, float)"},
      {"engine counts", all_reduce(100000, DataType::kFloat32), all_reduce(200000, DataType::kFloat32),
       "all_reduce(count 100000, float, sum)", "all_reduce(count 200000, float, sum)"},
  };
}

// Every mismatch, as each rank's first collective and after a barrier set the flag path up, with the
// check on and off. A rank returns 0 when its call failed with MismatchError naming both calls and
// nothing internal; the parent names the case that failed.
TEST(Mismatch, BothRanksNameBothUserCallsAtOnce) {
  for (const Mismatch& m : mismatches()) {
    for (bool set_up_first : {false, true}) {
      for (bool check : {false, true}) {
        const std::string job = unique_job_name("mismatch");
        auto codes = run_processes(2, 60s, [&](int rank) {
          CommOptions o;
          o.timeout = 20s;  // a wait for it fails the case: every rank must fail at once
          o.check_collectives = check;
          auto comm = Communicator::create(make_shm_transport(job, rank, 2, 20s), o);
          if (set_up_first) comm->barrier().wait();
          std::vector<std::byte> a(1 << 21), b(1 << 21);
          const auto start = std::chrono::steady_clock::now();
          try {
            (rank == 0 ? m.rank0 : m.rank1)(*comm, a, b).wait();
            return 2;
          } catch (const MismatchError& e) {
            const std::string what = e.what();
            if (!mentions_all(what, {"collective mismatch", m.said0, m.said1}) ||
                what.find("broadcast") != std::string::npos || what.find("uint8") != std::string::npos) {
              std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
              return 3;
            }
          } catch (const std::exception& e) {
            std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
            return 4;
          }
          return std::chrono::steady_clock::now() - start < 10s ? 0 : 5;
        });
        EXPECT_EQ(codes, (std::vector<int>{0, 0}))
            << m.name << (set_up_first ? ", after the set-up" : ", at the set-up") << (check ? ", check on" : "");
      }
    }
  }
}

// The communicator is broken after a mismatch at the set-up, as after any: the next call fails at once.
TEST(Mismatch, AtTheSetUpBreaksTheCommunicator) {
  const std::string job = unique_job_name("mismatch");
  auto codes = run_processes(2, 60s, [&](int rank) {
    auto comm = Communicator::create(make_shm_transport(job, rank, 2, 20s), CommOptions{});
    float x[2] = {1, 2};
    try {
      comm->all_reduce(x, x, rank == 0 ? 1 : 2, DataType::kFloat32, ReduceOp::sum()).wait();
      return 2;
    } catch (const MismatchError&) {
    }
    try {
      comm->barrier().wait();
      return 3;
    } catch (const AbortedError& e) {
      return std::string(e.what()).find("collective mismatch") != std::string::npos ? 0 : 4;
    }
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Ranks as threads (no shared segment, no check): different collectives whose messages never match
// wait out the timeout, which says the peer may have called another collective or count, and how to
// find out.
TEST(Mismatch, TimeoutWithoutTheCheckSaysWhatMayHaveHappened) {
  InProcJob threads(2, [] {
    CommOptions o;
    o.timeout = 300ms;
    return o;
  }());
  threads.run([](Communicator& comm) {
    std::vector<float> a(64, 1.f), b(128);
    try {
      if (comm.rank() == 0) {
        comm.all_reduce(a.data(), a.data(), a.size(), DataType::kFloat32, ReduceOp::sum()).wait();
      } else {
        comm.broadcast(a.data(), a.data(), a.size(), DataType::kFloat32, 1).wait();
      }
      ADD_FAILURE() << "rank " << comm.rank() << ": the mismatch went unnoticed";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("called another collective or count here: FSDP_CHECK_COLLECTIVES=1"),
                std::string::npos)
          << e.what();
    } catch (const CommError& e) {
      ADD_FAILURE() << e.what();
    }
  });
}

}  // namespace
}  // namespace fsdp::testing
