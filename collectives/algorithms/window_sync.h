// How ranks whose buffers lie in shared-memory windows (collectives/window.h) agree on an operation
// and pace each other through the communicator's control block, without messages:
//
//   agree:  each rank posts where its buffers are (window id, offset, bytes) for sequence s, then
//           waits for every peer's post of s. Where every rank's buffers are windows, each learns the
//           peers' buffers in its own address space and the windowed algorithm runs; otherwise all
//           ranks see the same posts and all fall back to the message-passing algorithm.
//   phases: after each phase a rank raises its progress counter to (s * kPhases + phase) (release)
//           and waits until every peer's counter reached it (acquire) before touching what the
//           peers wrote, or before returning a buffer the peers read.
//
// Posts alternate between two slots by sequence parity. A rank posts s + 2 only after its operation
// s finished, which needs every peer's contribution to s, so every peer has read its post of s by then.
// Every wait is an Op::wait_until on one named peer: bounded by the operation's timeout, failed at once
// when the peer's process dies, with the error text of a message wait.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/algorithms/blocks.h"
#include "collectives/core/op.h"
#include "collectives/core/task.h"
#include "collectives/core/window_table.h"

namespace fsdp {

// What a collective over windows carries from its submission to its run: this rank's buffers as
// window references (id 0: not in a window) and the bytes peers would read from each.
struct WindowPlan {
  std::shared_ptr<WindowTable> table;  // null: this communicator has no shared windows
  WindowRef read;
  size_t read_bytes = 0;
  WindowRef result;  // only for all-reduce (peers copy reduced blocks from it); else unused
  size_t result_bytes = 0;
  bool needs_result = false;
  // all_to_all(_v): this rank's blocks per peer (send offsets from `read`, recv bytes expected from
  // each), published in the control block; null for the other collectives. `read_bytes` (the send
  // buffer's extent) may then differ between ranks.
  const PeerBlocks* send_blocks = nullptr;
  const PeerBlocks* recv_blocks = nullptr;
};

class WindowSync {
 public:
  static constexpr uint64_t kPhases = 4;

  WindowSync(Op& op, WindowPlan plan);

  // Posts this rank's buffers (once; agree() posts if the caller did not) and waits for every peer's;
  // then windowed() says which path runs.
  void post();
  Task agree();
  // Whether every peer has posted this operation (a poll: the caller has work to do meanwhile).
  bool peers_posted() const;
  bool windowed() const { return windowed_; }
  // Rank p's buffers in this process (valid once windowed()).
  const std::byte* read_of(int p) const { return read_[static_cast<size_t>(p)]; }
  std::byte* result_of(int p) const { return result_[static_cast<size_t>(p)]; }
  // all_to_all: rank p's block for rank q as p posted it (offset from read_of(p)); checked against
  // p's send buffer and against what q expects by agree().
  const PeerBlockPost& block_of(int p, int q) const { return slot_posts(p)[q]; }

  // This rank finished `phase` (1 .. kPhases - 1); resumes once every peer has too.
  Task phase_done(int phase);

  // The coroutines above live in the operation's arena (task.h).
  OpArena& arena() { return op_.arena(); }

 private:
  // Rank p's post of this operation is in (acquire: what it posted is visible).
  bool has_posted(int p) const;
  // Rank p's PeerBlockPosts for this operation's slot.
  PeerBlockPost* slot_posts(int p) const {
    return blocks_ + (static_cast<size_t>(p) * 2 + seq_ % 2) * static_cast<size_t>(op_.size());
  }
  // all_to_all: throws CommError where rank p's block for this rank, or this rank's for p, is not
  // the size the other end expects, or lies outside p's posted send buffer.
  void check_blocks(int p, uint64_t peer_read_bytes) const;

  Op& op_;
  WindowPlan plan_;
  RankSync* control_;
  PeerBlockPost* blocks_;
  uint64_t seq_;  // the operation's sequence number + 1 (0 never posted)
  bool posted_ = false;
  bool windowed_ = false;
  std::pmr::vector<std::byte*> read_;  // in the operation's arena
  std::pmr::vector<std::byte*> result_;
};

}  // namespace fsdp
