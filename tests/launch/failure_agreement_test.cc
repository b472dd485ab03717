// agree_on_failure over an in-process store server, each old rank a thread with its own client: the
// lost set found through known_lost, the launcher's exited keys, or the timeout; a late rank fenced;
// one identical decision for every participant under randomized interleavings; a second epoch named
// in launch ranks through the first one's decision.
#include "launch/failure_agreement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "collectives/types/errors.h"
#include "launch/store.h"
#include "tests/launch/store_clients.h"

namespace fsdp::launch {
namespace {

using namespace std::chrono_literals;
constexpr const char* kJob = "fsdp/t/";

using testing::client_of;

struct Participant {
  int old_rank = 0;
  int64_t committed_step = 0;
  std::vector<int> known_lost;
  int delay_us = 0;
};

// Runs every participant at once; each one's decision (nullopt: it threw Fenced, whose text lands in
// `fenced`).
std::vector<std::optional<RecoveryDecision>> agree_all(const StoreServer& server, int64_t epoch, int old_size,
                                                       const std::vector<Participant>& ps,
                                                       std::chrono::milliseconds timeout,
                                                       std::vector<std::string>* fenced = nullptr,
                                                       const std::string& job = kJob) {
  std::vector<std::optional<RecoveryDecision>> out(ps.size());
  std::vector<std::string> why(ps.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ps.size(); ++i) {
    threads.emplace_back([&, i] {
      auto store = client_of(server);
      std::this_thread::sleep_for(std::chrono::microseconds(ps[i].delay_us));
      try {
        out[i] = agree_on_failure(
            *store, job, epoch, ps[i].old_rank, old_size, ps[i].committed_step, [&] { return ps[i].known_lost; },
            timeout);
      } catch (const Fenced& e) {
        why[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (fenced) *fenced = why;
  return out;
}

void expect_all(const std::vector<std::optional<RecoveryDecision>>& got, const RecoveryDecision& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].has_value()) << "participant " << i;
    EXPECT_EQ(encode_decision(*got[i]), encode_decision(want)) << "participant " << i;
  }
}

TEST(FailureAgreement, KnownLostRankIsLeftOut) {
  StoreServer server;
  const auto got = agree_all(server, 1, 4, {{0, 9, {2}}, {1, 9, {2}}, {3, 9, {2}}}, 10s);
  expect_all(got, {1, {0, 1, 3}, 9, {0, 1, 3}});
  RecoveryDecision current;
  ASSERT_TRUE(current_decision(*client_of(server), kJob, &current));
  EXPECT_EQ(current, (RecoveryDecision{1, {0, 1, 3}, 9, {0, 1, 3}}));
}

TEST(FailureAgreement, RankZeroLostThroughTheLaunchersExitedKey) {
  StoreServer server;
  client_of(server)->set(exited_key(kJob, 0), "was killed by signal 9 (SIGKILL)");
  expect_all(agree_all(server, 1, 4, {{1, 5, {}}, {2, 5, {}}, {3, 5, {}}}, 10s), {1, {1, 2, 3}, 5, {1, 2, 3}});
}

TEST(FailureAgreement, TwoLostTheHighestCommittedStepWins) {
  StoreServer server;
  client_of(server)->set(exited_key(kJob, 3), "exited with status 1");
  expect_all(agree_all(server, 1, 4, {{0, 11, {1}}, {2, 12, {}}}, 10s), {1, {0, 2}, 12, {0, 2}});
}

// Rank 1 posted alive, then its process ended before the decision (the launcher's key): left out.
TEST(FailureAgreement, RankThatPostedThenExitedIsLeftOut) {
  StoreServer server;
  auto store = client_of(server);
  store->set(std::string(kJob) + "ft/epoch1/alive/1", "6");
  store->set(exited_key(kJob, 1), "was killed by signal 9 (SIGKILL)");
  expect_all(agree_all(server, 1, 3, {{0, 6, {}}, {2, 6, {}}}, 10s), {1, {0, 2}, 6, {0, 2}});
}

TEST(FailureAgreement, SilentRankIsDecidedWithoutAfterTheTimeout) {
  StoreServer server;
  expect_all(agree_all(server, 1, 4, {{0, 3, {}}, {1, 3, {}}, {3, 3, {}}}, 200ms), {1, {0, 1, 3}, 3, {0, 1, 3}});
}

TEST(FailureAgreement, LateRankIsFenced) {
  StoreServer server;
  expect_all(agree_all(server, 1, 3, {{0, 3, {}}, {1, 3, {}}}, 100ms), {1, {0, 1}, 3, {0, 1}});
  auto store = client_of(server);
  try {
    agree_on_failure(*store, kJob, 1, 2, 3, 3, {}, 10s);
    ADD_FAILURE() << "not fenced";
  } catch (const Fenced& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 was declared lost at epoch 1 (the survivors went on without it): "
                                         "exiting"),
              std::string::npos)
        << e.what();
  }
}

// Epoch 2 over the 3 survivors of epoch 1 (launch ranks 0, 1, 3): old rank 2 is launch rank 3, whose
// exited key the launcher writes; the decision names launch ranks 0 and 1, and ft/current moves on.
TEST(FailureAgreement, SecondEpochMapsOldRanksToLaunchRanks) {
  StoreServer server;
  expect_all(agree_all(server, 1, 4, {{0, 4, {2}}, {1, 4, {2}}, {3, 4, {2}}}, 10s), {1, {0, 1, 3}, 4, {0, 1, 3}});
  client_of(server)->set(exited_key(kJob, 3), "was killed by signal 9 (SIGKILL)");
  expect_all(agree_all(server, 2, 3, {{0, 8, {}}, {1, 8, {}}}, 10s), {2, {0, 1}, 8, {0, 1}});
  RecoveryDecision current;
  ASSERT_TRUE(current_decision(*client_of(server), kJob, &current));
  EXPECT_EQ(current.epoch, 2);
}

// Random start delays, random known-lost views and a short timeout: whatever the interleaving, every
// participant that is not fenced returns the one decision stored, and a fenced one is not in it.
TEST(FailureAgreement, EveryParticipantGetsTheSameDecisionUnderRandomInterleavings) {
  StoreServer server;
  std::mt19937 rng(2026);
  for (int run = 0; run < 25; ++run) {
    const std::string job = "fsdp/random" + std::to_string(run) + "/";
    const int size = 3 + static_cast<int>(rng() % 3);
    const int dead = static_cast<int>(rng() % size);
    std::vector<Participant> ps;
    for (int r = 0; r < size; ++r) {
      if (r == dead) continue;
      Participant p{r, static_cast<int64_t>(rng() % 2) + 10, {}, static_cast<int>(rng() % 20000)};
      if (rng() % 2) p.known_lost = {dead};
      ps.push_back(p);
    }
    std::vector<std::string> fenced;
    const auto got = agree_all(server, 1, size, ps, 15ms, &fenced, job);
    std::optional<RecoveryDecision> first;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!got[i]) {
        EXPECT_NE(fenced[i].find("was declared lost"), std::string::npos) << fenced[i];
        continue;
      }
      if (!first) first = got[i];
      EXPECT_EQ(*got[i], *first) << "run " << run << " participant " << i;
      EXPECT_EQ(std::count(got[i]->survivors.begin(), got[i]->survivors.end(), dead), 0);
    }
    ASSERT_TRUE(first.has_value()) << "run " << run;
    for (size_t i = 0; i < got.size(); ++i) {
      const bool in = std::count(first->survivors.begin(), first->survivors.end(), ps[i].old_rank) > 0;
      EXPECT_EQ(in, got[i].has_value()) << "run " << run << " rank " << ps[i].old_rank;
    }
  }
}

TEST(FailureAgreement, DecisionTextRoundTripsAndGarbageIsRefused) {
  const RecoveryDecision d{3, {0, 2, 5}, 41, {0, 3, 7}};
  EXPECT_EQ(encode_decision(d), "epoch 3 step 41 survivors 0,2,5 launch 0,3,7");
  EXPECT_EQ(decode_decision(encode_decision(d)), d);
  EXPECT_THROW(decode_decision("epoch 3 step 41 survivors 0,2 launch 0"), InvalidArgument);
  EXPECT_THROW(decode_decision("commit"), InvalidArgument);
}

}  // namespace
}  // namespace fsdp::launch
