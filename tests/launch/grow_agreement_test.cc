// Growing back through the store (launch/grow_agreement.h), ranks and newcomers as threads with their own
// clients of an in-process store server: the step's commit carries the ticket count when a newcomer
// waits, every member and newcomer reads one grow decision (members first, newcomers last), a later
// loss maps ranks to launch ranks through it, and a newcomer still waiting learns the job finished.
#include "launch/grow_agreement.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "collectives/types/errors.h"
#include "launch/step_commit.h"
#include "launch/store.h"
#include "tests/launch/store_clients.h"

namespace fsdp::launch {
namespace {

using namespace std::chrono_literals;
constexpr const char* kJob = "fsdp/g/";

using testing::client_of;

// Three members of epoch 1 (launch ranks 0, 1, 2 after rank 3 was lost) vote on step 5, the ticket counter
// their snapshot, while the replacement of rank 3 waits: every voter reads "commit 1"; all agree on epoch
// 2 = 0,1,2 then 3.
TEST(GrowAgreement, MembersAndNewcomerReadOneDecision) {
  StoreServer server("127.0.0.1", 0);
  auto newcomer_store = client_of(server);
  const int64_t ticket = post_join(*newcomer_store, kJob, 3);
  EXPECT_EQ(ticket, 1);
  const std::vector<int> members{0, 1, 2};
  std::vector<RecoveryDecision> decided(3);
  std::vector<std::string> votes(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::shared_ptr<KeyValueStore> store = client_of(server);
      StepCommit commit(store, std::string(kJob) + "ft/epoch1/", r, 3, join_tickets_key(kJob));
      EXPECT_TRUE(commit.vote(5, nullptr, 5s));
      votes[static_cast<size_t>(r)] = commit.last_decision();
      const int64_t last = commit.last_snapshot().value_or(-1);
      decided[static_cast<size_t>(r)] = agree_on_grow(*store, kJob, 2, members, 5, 0, last, 5s);
    });
  }
  Admission a;
  EXPECT_TRUE(wait_for_admission(*newcomer_store, kJob, ticket, &a, nullptr));
  for (auto& t : threads) t.join();
  const RecoveryDecision want{2, {0, 1, 2}, 5, {0, 1, 2, 3}};
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(votes[static_cast<size_t>(r)], "commit 1") << "rank " << r;
    EXPECT_EQ(decided[static_cast<size_t>(r)], want) << "rank " << r;
  }
  EXPECT_EQ(a.decision, want);
  EXPECT_EQ(a.decision.joined(), 1);
  EXPECT_EQ(a.last_ticket, 1);
  RecoveryDecision current;
  ASSERT_TRUE(current_decision(*newcomer_store, kJob, &current));
  EXPECT_EQ(current, want);
  EXPECT_EQ(decode_decision(encode_decision(want)), want);
  // A later loss in epoch 3 names the newcomer (new rank 3) by its launch rank.
  std::vector<std::thread> agree;
  std::vector<RecoveryDecision> after(3);
  for (int r : {0, 1, 3}) {
    agree.emplace_back([&, r] {
      auto store = client_of(server);
      after[r == 3 ? 2 : static_cast<size_t>(r)] = agree_on_failure(
          *store, kJob, 3, r, 4, 5, [] { return std::vector<int>{2}; }, 5s);
    });
  }
  for (auto& t : agree) t.join();
  for (const RecoveryDecision& d : after) EXPECT_EQ(d, (RecoveryDecision{3, {0, 1, 3}, 5, {0, 1, 3}}));
}

TEST(GrowAgreement, AMissingEntryIsSkippedAndAWaitingNewcomerSeesTheEnd) {
  StoreServer server("127.0.0.1", 0);
  auto store = client_of(server);
  EXPECT_EQ(store->add(std::string(kJob) + "ft/join/tickets", 1), 1);  // a newcomer that died before its entry
  const int64_t ticket = post_join(*store, kJob, 2);
  const RecoveryDecision d = agree_on_grow(*store, kJob, 1, {0, 1}, 7, 0, 1, 50ms);
  EXPECT_EQ(d, (RecoveryDecision{1, {0, 1}, 7, {0, 1}}));  // ticket 2 waits for the next step's grow
  // Of two tickets of rank 3 the later counts; rank 4's newcomer exited before admission (the launcher's key).
  post_join(*store, kJob, 3);
  post_join(*store, kJob, 4);
  const int64_t last = post_join(*store, kJob, 3);
  store->set(exited_key(kJob, 4), "was killed by signal 9 (SIGKILL)");
  const RecoveryDecision grown = agree_on_grow(*store, kJob, 2, {0, 1}, 8, 2, last, 50ms);
  EXPECT_EQ(grown, (RecoveryDecision{2, {0, 1}, 8, {0, 1, 3}}));
  mark_finished(*store, kJob);
  Admission a;
  EXPECT_FALSE(wait_for_admission(*store, kJob, ticket, &a, nullptr));
  EXPECT_THROW(wait_for_admission(*store, "fsdp/other/", 1, &a, [] { return true; }), TimeoutError);
  // Rank 1 is a member of the latest decision: nothing to replace; rank 4 is not, and its exit is cleared.
  EXPECT_THROW(wait_until_replaceable(*store, kJob, 1, [] { return true; }), TimeoutError);
  wait_until_replaceable(*store, kJob, 4, [] { return true; });
  EXPECT_FALSE(store->erase(exited_key(kJob, 4)));
}

}  // namespace
}  // namespace fsdp::launch
