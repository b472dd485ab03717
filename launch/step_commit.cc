#include "launch/step_commit.h"

#include <utility>

namespace fsdp::launch {
namespace {

const std::string kCommit = "commit";
constexpr const char* kAbort = "abort";

}  // namespace

StepCommit::StepCommit(std::shared_ptr<KeyValueStore> store, std::string prefix, int rank, int size,
                       std::string snapshot)
    : store_(std::move(store)), prefix_(std::move(prefix)), snapshot_(std::move(snapshot)), rank_(rank), size_(size) {
  if (!store_ || size_ < 1 || rank_ < 0 || rank_ >= size_) {
    throw InvalidArgument("StepCommit: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                          (store_ ? "" : " without a store") + " (prefix '" + prefix_ + "')");
  }
}

bool StepCommit::vote(int64_t step, const std::function<std::string()>& lost, std::chrono::milliseconds timeout) {
  const std::string votes = key(step, "votes"), decision = key(step, "decision");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const ErrorContext ctx{rank_, -1, "step_commit_vote", static_cast<uint64_t>(step), 0};
  const auto counted = [&] {
    return std::to_string(store_->add(votes, 0)) + " of " + std::to_string(size_) + " votes";
  };
  // The first slice counts this vote and waits for the decision (one round trip with the project's
  // store, whose creating the decision wakes it); the next slices only wait. A torch store may not
  // wake a get on a key compare_set created: each slice asks again.
  for (bool voted = false;; voted = true) {
    try {
      return decided(voted ? store_->get(decision, kSlice)
                           : store_->vote(votes, decision, size_, kCommit, snapshot_, kSlice));
    } catch (const TimeoutError&) {
    }
    if (const std::string why = lost ? lost() : std::string(); !why.empty()) {
      throw PeerLostDuringVote(ctx, "step " + std::to_string(step) + " not decided (" + counted() + "): " + why);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError(ctx, "step " + std::to_string(step) + " not decided within " +
                                  std::to_string(timeout.count()) + " ms: " + counted() + " at " + store_->describe());
    }
  }
}

bool StepCommit::decided(const std::string& value) {
  last_decision_ = value;
  return value.rfind(kCommit, 0) == 0;
}

std::optional<int64_t> StepCommit::last_snapshot() const {
  if (snapshot_.empty() || last_decision_.rfind(kCommit, 0) != 0) return std::nullopt;
  return vote_snapshot(last_decision_);
}

bool StepCommit::close(int64_t step) {
  return store_->compare_set(key(step, "decision"), "", kAbort).rfind(kCommit, 0) == 0;
}

}  // namespace fsdp::launch
