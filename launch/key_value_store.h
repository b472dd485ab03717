// What connect_world needs from a rendezvous store, and nothing more: the project's StoreClient is
// one; the PyTorch backend (python/) adapts the c10d::Store torch hands a process group to it, so a
// job started by torch rendezvouses through torch's own store.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::launch {

// What a vote with a snapshot counter writes (KeyValueStore::vote, OP_VOTE): the value, one space,
// the counter's decimal value ("commit 3"; a missing counter reads 0).
inline std::string vote_decision(const std::string& value, int64_t snapshot) {
  return value + " " + std::to_string(snapshot);
}
// The snapshot a decision carries: the decimal after its last space; nullopt when it has none (a
// close's "abort", a vote without a snapshot counter).
inline std::optional<int64_t> vote_snapshot(const std::string& decision) {
  const size_t space = decision.rfind(' ');
  if (space == std::string::npos) return std::nullopt;
  int64_t n = 0;
  const char* end = decision.data() + decision.size();
  const auto [ptr, ec] = std::from_chars(decision.data() + space + 1, end, n);
  if (ec != std::errc() || ptr != end) return std::nullopt;  // (an empty tail fails from_chars too)
  return n;
}

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // The key's value, waiting while it is missing: the store's own bound, or `timeout`. TimeoutError after it.
  virtual std::string get(const std::string& key) = 0;
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Returns once every key exists; TimeoutError naming the missing ones after the bound. A timeout of 0
  // (get's too) only looks: connect_world passes what is left of its start-up deadline, 0 once it
  // passed, and looks at missing keys so; an adapter of a store that reads 0 as "no timeout" (c10d)
  // must turn it into the smallest wait it has.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Adds delta to the decimal counter at key (missing: 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Atomically at the server (c10d::Store::compareSet's meaning): when the key holds `expected`, or is
  // missing and `expected` is "", it now holds `desired`; returns the value the key holds after the
  // call, so exactly one of many racing compare_set(key, "", x_i) stores its x_i and every caller gets
  // the winner's. A missing key with a non-empty `expected` stays missing and reads "" (torch's servers
  // answer `expected` there; the torch adapters turn that into "" whenever expected != desired, the one
  // case it can be told apart in). A key created this way may not wake torch's waiters (torch <= 2.x
  // servers wake them on set only): poll with timeouts, as StepCommit does.
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) = 0;
  // A counting vote: adds 1 to the counter at `counter`; the add that makes it `target` writes `value`
  // into `decision` unless it holds one (compare_set from ""); returns the decision, waiting up to
  // `timeout` while it is missing (TimeoutError: the vote stays counted; get() the decision to wait
  // on). With a `snapshot` counter (a key, "" for none) the decision written is
  // vote_decision(value, that counter's value when the vote completed): "commit 3", so every voter
  // reads one snapshot of it with the decision at no extra round trip (the step commit's grow check).
  // Here in up to four round trips, the snapshot read just after the completing add; StoreClient asks
  // its server for it in one (OP_VOTE), which reads the snapshot in the same request, and the
  // server's creating the decision wakes every waiting voter.
  virtual std::string vote(const std::string& counter, const std::string& decision, int64_t target,
                           const std::string& value, const std::string& snapshot, std::chrono::milliseconds timeout) {
    if (add(counter, 1) != target) return get(decision, timeout);
    return compare_set(decision, "", snapshot.empty() ? value : vote_decision(value, add(snapshot, 0)));
  }
  // Removes key; true if it existed.
  virtual bool erase(const std::string& key) = 0;
  // Where the store is, for error messages: "the store 10.0.0.7:29500".
  virtual std::string describe() const = 0;
};

}  // namespace fsdp::launch
