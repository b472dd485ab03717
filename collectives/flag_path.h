// Small collectives among ranks that share memory, through flags and slots in one shared segment:
// no progress engine, no messages, no allocation per call (the 8-byte all-reduce's cost was the
// engine's machinery, not the data: docs/benchmarks.md "Where the 8-byte latency goes").
//
// Every rank of the communicator maps one segment (a memfd, as the windows' control block) holding
// two slots per rank. A collective whose per-rank contribution fits a slot runs in two halves:
//   post:     at the call, the rank copies its contribution into its slot (the one of its flag
//             operation's parity), then publishes the sequence number (release); the call returns.
//   complete: at Work::wait / Work::test, or at the communicator's next collective call, the rank
//             waits until every peer published the same sequence number (acquire; bounded by the
//             timeout, failed at once when a peer's process is gone or the communicator aborted),
//             checks every peer posted the same collective (fingerprint), and computes its result
//             from the slots: reductions in rank order (every rank gets the same bits), gathers,
//             the root's copy.
// Why two slots suffice: a communicator has at most one flag operation outstanding (its next call
// completes it first), so a rank posts operation k + 2 into the slot of k only after completing
// k + 1, which needed every peer's post of k + 1, which each peer made only after completing k:
// nobody still reads the slot being overwritten.
// Call order with the engine: a flag operation completes after the engine operations the
// communicator was given before it (completion waits for them), and the next engine operation is
// submitted only after it completed, so operations of one communicator still complete in call order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/algorithms/reduction_plan.h"
#include "collectives/core/fingerprint.h"
#include "collectives/core/window_table.h"
#include "collectives/types/collective_kind.h"
#include "collectives/types/errors.h"

namespace fsdp {

class Op;
class ProgressEngine;
class Transport;

// The most a rank posts for one flag operation (FSDP_FLAG_PATH_BYTES is capped at it).
inline constexpr size_t kFlagPayloadBytes = 4096;

// The header and the first 16 payload bytes share one cache line: a peer reads an 8-byte
// all-reduce's post in one transfer.
struct FlagSlot {
  alignas(64) std::atomic<uint64_t> seq;  // the operation's sequence number + 1, stored last
  Fingerprint fingerprint;                // what the rank called, checked by every peer
  uint64_t bytes;                         // payload bytes posted
  std::byte payload[kFlagPayloadBytes];
};
static_assert(offsetof(FlagSlot, payload) == 48, "an 8-byte post shares the header's cache line");

// One communicator's segment, kept alive by the flag operations that use it.
class FlagSegment {
 public:
  // `endpoints`: communicator rank -> transport endpoint (for liveness checks and error text).
  FlagSegment(Mapping mapping, std::shared_ptr<Transport> transport, std::vector<int> endpoints, int rank);

  static size_t bytes_for(int n) { return sizeof(FlagSlot) * 2 * static_cast<size_t>(n); }

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(endpoints_.size()); }
  int endpoint(int r) const { return endpoints_[static_cast<size_t>(r)]; }
  Transport& transport() const { return *transport_; }
  FlagSlot& slot(int r, uint64_t parity) const { return slots_[static_cast<size_t>(r) * 2 + parity]; }
  // More ranks than cores spin on this host: waits yield early instead of spinning.
  bool oversubscribed() const { return oversubscribed_; }

  // Publishes in this rank's slot of `parity` (the next flag operation's) that it runs the collective
  // `called` through the engine: a peer waiting there on the flag path at the same sequence number
  // sees the fingerprints differ and fails with MismatchError. Safe for the same reason as a post:
  // the previous flag operation completed before any engine call is made.
  void mark_engine_call(uint64_t parity, const Fingerprint& called) { publish(parity, called, 0, nullptr); }
  // Writes a call (and its payload) into this rank's slot of `parity`, its sequence number last. A
  // reader of an engine call's mark may race the next mark, so the number is cleared first and a
  // reader checks it again after copying (a sequence lock): it never takes a torn call for a mismatch.
  void publish(uint64_t parity, const Fingerprint& call, size_t bytes, const void* payload);

  // What peer p's slot of `parity` says of its call at sequence number `seq`: not made yet, made (and
  // copied into `call`), or passed (the slot holds a later call: p made this one through the engine
  // and moved on, which a peer on the flag path at `seq` cannot have done).
  enum class PeerCall { kNotYet, kMade, kPassed };
  PeerCall peer_call(int p, uint64_t parity, uint64_t seq, Fingerprint& call) const;

  // Breaks the segment: every flag operation still waiting, and every later one, fails with `why`.
  // `on_break` (set by the communicator while it lives) also breaks its engine stream.
  void break_with(const std::string& why, bool aborted);
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  std::string broken_reason() const;
  bool aborted() const;
  void set_on_break(std::function<void(const std::string&)> f);

 private:
  Mapping mapping_;
  FlagSlot* slots_;
  std::shared_ptr<Transport> transport_;
  std::vector<int> endpoints_;
  int rank_;
  bool oversubscribed_;
  std::atomic<bool> broken_{false};
  mutable std::mutex mu_;
  std::string why_;
  bool aborted_ = false;
  std::function<void(const std::string&)> on_break_;
};

// One flag operation: posted at the call, completed by whoever waits first. Reused by the
// communicator once no Work holds it any more (its vectors keep their capacity).
class FlagOp {
 public:
  struct Call {
    // all_reduce, all_gather, reduce_scatter, broadcast, reduce or barrier
    CollectiveKind kind = CollectiveKind::kBarrier;
    const void* send = nullptr;   // this rank's contribution (copied into the slot at post)
    size_t post_bytes = 0;        // bytes of it
    void* recv = nullptr;         // where the result goes (null where this rank gets none)
    size_t count = 0;             // elements as the call takes them (fingerprint, reductions)
    DataType type = DataType::kFloat32;
    ReduceOp reduce{};
    int root = -1;
    size_t block_bytes = 0;       // all-gather: each rank's block; reduce-scatter: each result block

    // As the engine path fingerprints the same call (Communicator::Impl::submit_collective).
    Fingerprint fingerprint(uint64_t seq) const;
  };

  // Posts `call` for sequence number `seq` into the slot of `parity`. `prior`: the engine operation
  // this one must complete after (null when none is pending). Fails at once, without posting, when
  // the segment is broken or `prior` already failed.
  void post(std::shared_ptr<FlagSegment> segment, const Call& call, uint64_t seq, uint64_t parity,
            std::chrono::milliseconds timeout, uint64_t comm_context, std::shared_ptr<Op> prior,
            std::weak_ptr<ProgressEngine> engine);

  // Fails without posting, as the call `ctx` names: `error` (a CommError; its peer kept) prefixed with `why`.
  void fail_unposted(const std::exception_ptr& error, ErrorContext ctx, const std::string& why);

  // Completes the operation if every peer has posted (never blocks); true once done. Rethrows the
  // operation's error.
  bool test();
  // Completes the operation, waiting on the peers up to the timeout; rethrows its error. With
  // `give_up` before that, throws TimeoutError once it passed while the operation goes on (Work::wait(ms)).
  void wait(std::chrono::steady_clock::time_point give_up = std::chrono::steady_clock::time_point::max());
  // Whether it completed (or failed) already; never throws.
  bool settled() const { return state_.load(std::memory_order_acquire) != State::kPending; }

  std::chrono::steady_clock::time_point started_at() const { return started_at_; }
  std::chrono::steady_clock::time_point finished_at() const { return finished_at_; }

 private:
  enum class State : int { kPending, kDone, kFailed };
  // Runs what can run, waiting on peers when `block` until `give_up`; returns true once settled. Under mu_.
  bool advance(bool block, std::chrono::steady_clock::time_point give_up);
  // Whether peer p posted: at once when !block, else waiting until it did (true), `give_up` (false),
  // or an error (thrown).
  bool peer_posted(int p, bool block, std::chrono::steady_clock::time_point give_up);
  void compute();
  void fail(const std::exception_ptr& error);
  void rethrow_if_failed() const;

  std::shared_ptr<FlagSegment> segment_;
  Call call_;
  uint64_t seq_ = 0;
  uint64_t parity_ = 0;
  std::chrono::steady_clock::time_point deadline_{};
  std::chrono::milliseconds timeout_{0};
  ErrorContext ctx_;
  std::shared_ptr<Op> prior_;
  std::weak_ptr<ProgressEngine> engine_;
  ReductionPlan plan_{DataType::kFloat32, ReduceOp{}};
  int next_peer_ = 0;  // peers below it have posted
  uint64_t flight_id_ = 0;

  std::atomic<State> state_{State::kPending};
  Failure failure_;
  std::chrono::steady_clock::time_point started_at_{};
  std::chrono::steady_clock::time_point finished_at_{};
  std::mutex mu_;
  std::vector<const std::byte*> sources_;
  std::vector<std::byte> scratch_;
};

}  // namespace fsdp
