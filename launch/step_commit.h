// One commit decision per training step, agreed through the store (torchft's should_commit): every rank
// votes once it holds all it needs to apply step s; the vote that completes the count writes "commit"
// (at the store's server, in the same request: KeyValueStore::vote);
// a survivor resolving a step whose voters may be dead writes "abort" unless "commit" came first.
// compare_set is atomic at the store's server, so every voter and every closer of every epoch reads
// the one decision a step gets. Keys, under `prefix` ("fsdp/<run>/ft/epoch3/"):
//   step<s>/votes     add()ed by each voter
//   step<s>/decision  "commit" or "abort", written once by compare_set from ""; with a snapshot counter
//                     the commit carries that counter's value when the vote completed ("commit 3": the
//                     grow tickets, launch/grow_agreement.h), written by the server in the vote's own
//                     request, so every voter reads the same value at no extra round trip
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "collectives/types/errors.h"
#include "launch/key_value_store.h"

namespace fsdp::launch {

// A vote gave up because `lost` named a peer: the step's fate is for recovery (StepCommit::close).
class PeerLostDuringVote : public PeerLostError {
 public:
  using PeerLostError::PeerLostError;
};

class StepCommit {
 public:
  // `snapshot`: the key of a counter whose value each commit carries (KeyValueStore::vote); "" for none.
  StepCommit(std::shared_ptr<KeyValueStore> store, std::string prefix, int rank, int size,
             std::string snapshot = std::string());

  // Votes for `step` (KeyValueStore::vote: one store round trip with the project's store) and waits
  // for its decision in slices of kSlice, asking `lost` after each empty one: a non-empty answer (a
  // lost peer, named) throws PeerLostDuringVote; past `timeout`, TimeoutError naming the step and the
  // votes counted. True when the step is committed.
  bool vote(int64_t step, const std::function<std::string()>& lost, std::chrono::milliseconds timeout);
  // Recovery's resolution of `step`: "abort" unless it was already committed; true when committed.
  bool close(int64_t step);
  // The last decision vote() read, snapshot included ("commit 3"); empty before any.
  const std::string& last_decision() const { return last_decision_; }
  // The snapshot counter's value the last decision carries; nullopt for an abort or without a counter.
  std::optional<int64_t> last_snapshot() const;

  static constexpr std::chrono::milliseconds kSlice{20};

 private:
  std::string key(int64_t step, const char* leaf) const { return prefix_ + "step" + std::to_string(step) + "/" + leaf; }

  std::shared_ptr<KeyValueStore> store_;
  std::string prefix_;
  std::string snapshot_;
  bool decided(const std::string& value);  // records it; true for a commit

  std::string last_decision_;
  int rank_;
  int size_;
};

}  // namespace fsdp::launch
