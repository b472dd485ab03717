// The FSDP2 schedule of one root's units, for every front end: which all-gathers start ahead of a unit
// (prefetch), who keeps its parameters after forward, the reduce-scatter pipeline (one in flight), and
// whether backward reduces at all (accumulation). It decides; the front end acts: FsdpModel on its
// FsdpUnits, fully_shard (python/fsdp_runtime/_fsdp_state.py) on torch's side through _C.FsdpSchedule.
// Units are the front end's integer ids.
//
// Unit order. Forward prefetch follows the pre-forward order of the previous forward; backward prefetch
// this forward's post-forward order, reversed (FSDP2's post_forward_order: a root that wraps the others
// ends its forward last and starts backward first). The C++ model declares its order, units 0..n-1 every
// step (fixed(n)), so its first forward prefetches too. A torch module's order is recorded anew by every
// forward: a forward may run other units than the last one did (a block called alone, a branch), and
// prefetches along a stale order would gather units that never run.
//
//   recorded, root R wrapping A and B:   pre-forward order R A B   post-forward order A B R
//   forward of A (prefetch 1): starts B's all-gather;  backward of R: starts B's;  of B: A's
//
// Forward nesting: the first pre_forward while none is open opens a forward (that unit is its root);
// it ends when the root's post_forward closes it. The root ends last and its backward runs first, so it
// keeps its parameters (for the fixed order: the last unit), as FSDP2's root does.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spec/policy.h"

namespace fsdp::runtime {

class FsdpSchedule {
 public:
  // Records the order of every forward.
  FsdpSchedule() = default;
  // Units 0..n-1, that order every forward (FsdpModel): nothing is recorded.
  static FsdpSchedule fixed(int num_units);

  // What a unit does with its full parameters after its forward.
  enum class AfterForward { kKeep, kFree, kKeepSlice };  // kKeepSlice: the 1/k slice of reshard k

  // --- forward ---
  // Unit u's forward starts (it opens one when none is open; a root whose forward is still open had its
  // previous forward raise, and opens anew). Returns the units whose all-gathers start after u's own:
  // the `prefetch` after u in the previous forward's order. Valid until the next call.
  std::span<const int> pre_forward(int u, int64_t prefetch);
  // Unit u's forward ended; `backward_follows` is false under no_grad or without trainable parameters
  // (then it frees whatever the policy says).
  AfterForward post_forward(int u, const spec::Reshard& reshard, bool backward_follows);
  bool forward_open() const { return depth_ > 0; }
  // After the forward ended: the units it prefetched but did not run (their all-gathers land unused).
  std::vector<int> unused_prefetches() const;
  // The units of the last forward: pre-forward order, and post-forward order.
  const std::vector<int>& order() const { return last_order_; }
  const std::vector<int>& post_order() const { return post_order_; }

  // --- backward ---
  // Unit u's backward starts: returns the units whose all-gathers start after u's own, the `prefetch`
  // before u in post-forward order. Valid until the next call.
  std::span<const int> pre_backward(int u, int64_t prefetch);
  // Whether a backward started since the last finish_backward() (torch: a forward then runs in
  // backward, a checkpoint's recompute).
  bool in_backward() const { return backward_started_; }
  // The units whose backward started, in that order.
  const std::vector<int>& backward_units() const { return backward_units_; }
  // Unit u's gradients are in. Returns whether u reduce-scatters (not when sync is off: the full
  // gradients accumulate) and, when it does, the unit whose reduce-scatter must finish before u's
  // starts (-1: none): one in flight, overlapping the next unit's backward, so the buffers of at most
  // one are live (what the planner counts).
  struct Reduce {
    bool start = false;
    int finish_first = -1;
  };
  Reduce post_backward(int u, bool sync);
  // Backward ended: returns the unit whose reduce-scatter is still in flight (-1: none) and forgets it.
  int finish_backward();
  // An abandoned step: forgets the reduce in flight and the open forward and backward.
  void discard_step();

  // --- between steps ---
  // Whether the next forward's opening all-gathers include u's: the first unit of the order and the
  // `prefetch` after it, started as each unit's shard is updated (nothing with prefetch 0).
  bool next_step_gathers(int u, int64_t prefetch) const;

 private:
  // The `prefetch` units after (direction +1) or before (-1) u in `order`, into prefetch_.
  std::span<const int> neighbours(const std::vector<int>& order, int u, int direction, int64_t prefetch);

  bool fixed_ = false;
  int depth_ = 0;                // units whose forward is running (nested)
  int root_ = -1;                // the unit that opened the forward
  std::vector<int> order_;       // pre-forward order of the forward running
  std::vector<int> last_order_;  // ... of the previous one: what forward prefetches follow
  std::vector<int> post_order_;  // post-forward order: backward prefetches follow it reversed
  std::vector<int> prefetched_;  // units this forward prefetched
  std::vector<int> prefetch_;    // the last call's answer
  std::vector<int> backward_units_;
  bool backward_started_ = false;
  int pending_reduce_ = -1;  // unit whose reduce-scatter is in flight
};

}  // namespace fsdp::runtime
