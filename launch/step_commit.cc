#include "launch/step_commit.h"

#include <utility>

namespace fsdp::launch {
namespace {

const std::string kCommit = "commit";
constexpr const char* kAbort = "abort";

}  // namespace

StepCommit::StepCommit(std::shared_ptr<KeyValueStore> store, std::string prefix, int rank, int size)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size) {
  if (!store_ || size_ < 1 || rank_ < 0 || rank_ >= size_) {
    throw InvalidArgument("StepCommit: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                          (store_ ? "" : " without a store") + " (prefix '" + prefix_ + "')");
  }
}

bool StepCommit::vote(int64_t step, const std::function<std::string()>& lost, std::chrono::milliseconds timeout) {
  const std::string decision = key(step, "decision");
  const int64_t votes = store_->add(key(step, "votes"), 1);
  if (votes == size_)
    return decided(store_->compare_set(decision, "", annotate_ ? kCommit + annotate_(step) : kCommit));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const ErrorContext ctx{rank_, -1, "step_commit_vote", static_cast<uint64_t>(step), 0};
  for (;;) {
    try {
      // A torch store may not wake a get on a key compare_set created: each slice asks again.
      return decided(store_->get(decision, kSlice));
    } catch (const TimeoutError&) {
    }
    if (const std::string why = lost ? lost() : std::string(); !why.empty()) {
      throw PeerLostDuringVote(ctx, "step " + std::to_string(step) + " not decided (" + std::to_string(votes) + " of " +
                                        std::to_string(size_) + " votes when this rank voted): " + why);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError(ctx, "step " + std::to_string(step) + " not decided within " +
                                  std::to_string(timeout.count()) +
                                  " ms: " + std::to_string(store_->add(key(step, "votes"), 0)) + " of " +
                                  std::to_string(size_) + " votes at " + store_->describe());
    }
  }
}

bool StepCommit::decided(const std::string& value) {
  last_decision_ = value;
  return value.rfind(kCommit, 0) == 0;
}

bool StepCommit::close(int64_t step) {
  return store_->compare_set(key(step, "decision"), "", kAbort).rfind(kCommit, 0) == 0;
}

}  // namespace fsdp::launch
