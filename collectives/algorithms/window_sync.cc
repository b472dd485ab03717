#include "collectives/algorithms/window_sync.h"

#include "collectives/types/errors.h"

namespace fsdp {

WindowSync::WindowSync(Op& op, WindowPlan plan)
    : op_(op), plan_(std::move(plan)), control_(plan_.table ? plan_.table->control() : nullptr),
      blocks_(plan_.table ? plan_.table->block_posts() : nullptr), seq_(op.context().seq + 1), read_(&op.arena()),
      result_(&op.arena()) {}

void WindowSync::post() {
  if (posted_ || !control_) return;
  posted_ = true;
  const int n = op_.size();
  const int me = op_.rank();
  WindowPost& mine = control_[me].post[seq_ % 2];
  mine.read = plan_.read;
  mine.read_bytes = plan_.read_bytes;
  mine.result = plan_.needs_result ? plan_.result : WindowRef{};
  mine.result_bytes = plan_.result_bytes;
  if (plan_.send_blocks) {
    PeerBlockPost* posts = slot_posts(me);
    for (int q = 0; q < n; ++q) {
      posts[q] = PeerBlockPost{plan_.send_blocks->offset[q], plan_.send_blocks->bytes[q], plan_.recv_blocks->bytes[q]};
    }
  }
  mine.seq.store(seq_, std::memory_order_release);
}

bool WindowSync::has_posted(int p) const {
  return control_[p].post[seq_ % 2].seq.load(std::memory_order_acquire) == seq_;
}

bool WindowSync::peers_posted() const {
  if (!control_) return true;
  for (int p = 0; p < op_.size(); ++p) {
    if (p != op_.rank() && !has_posted(p)) return false;
  }
  return true;
}

Task WindowSync::agree() {
  const int n = op_.size();
  const int me = op_.rank();
  if (!control_) co_return;  // released by an abort, or never shared: the caller falls back
  post();
  bool all = true;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    co_await op_.wait_until(p, plan_.read_bytes, [this, p] { return has_posted(p); });
    const WindowPost& post = control_[p].post[seq_ % 2];
    all &= post.read.windowed() && (!plan_.needs_result || post.result.windowed());
  }
  all &= plan_.read.windowed() && (!plan_.needs_result || plan_.result.windowed());
  if (!all) co_return;

  read_.assign(static_cast<size_t>(n), nullptr);
  result_.assign(static_cast<size_t>(n), nullptr);
  for (int p = 0; p < n; ++p) {
    const WindowPost& post = control_[p].post[seq_ % 2];
    ErrorContext ctx = op_.context();
    ctx.peer = p;
    const bool sizes_agree = plan_.send_blocks || post.read_bytes == plan_.read_bytes;  // all_to_all_v's differ
    if (!sizes_agree || (plan_.needs_result && post.result_bytes != plan_.result_bytes)) {
      throw CommError(ctx, "message size mismatch: rank " + std::to_string(p) + " posted " +
                               std::to_string(post.read_bytes) + " bytes, rank " + std::to_string(me) + " expected " +
                               std::to_string(plan_.read_bytes) + " (do the ranks pass the same count?)");
    }
    std::string error;
    read_[p] = plan_.table->peer_address(p, post.read, post.read_bytes, error);
    if (read_[p] && plan_.needs_result) result_[p] = plan_.table->peer_address(p, post.result, post.result_bytes, error);
    if (!read_[p] || (plan_.needs_result && !result_[p])) throw CommError(ctx, error);
    if (plan_.send_blocks) check_blocks(p, post.read_bytes);
  }
  windowed_ = true;
  plan_.table->count_windowed_run();
}

void WindowSync::check_blocks(int p, uint64_t peer_read_bytes) const {
  const int me = op_.rank();
  const PeerBlockPost& theirs = block_of(p, me);  // p's block for this rank
  const PeerBlockPost& mine = block_of(me, p);
  ErrorContext ctx = op_.context();
  ctx.peer = p;
  auto mismatch = [&](int from, int to, uint64_t sent, uint64_t expected) {
    throw CommError(ctx, "message size mismatch: rank " + std::to_string(from) + " sends rank " + std::to_string(to) +
                             " " + std::to_string(sent) + " bytes, rank " + std::to_string(to) + " expects " +
                             std::to_string(expected) + " (do send_counts and recv_counts agree?)");
  };
  // Both directions, so both ranks of a disagreeing pair fail, not one while the other waits.
  if (theirs.send_bytes != mine.recv_bytes) mismatch(p, me, theirs.send_bytes, mine.recv_bytes);
  if (mine.send_bytes != theirs.recv_bytes) mismatch(me, p, mine.send_bytes, theirs.recv_bytes);
  if (theirs.offset > peer_read_bytes || theirs.send_bytes > peer_read_bytes - theirs.offset) {
    throw CommError(ctx, "rank " + std::to_string(p) + " posted a " + std::to_string(theirs.send_bytes) +
                             "-byte block at offset " + std::to_string(theirs.offset) + " of its " +
                             std::to_string(peer_read_bytes) + "-byte send buffer");
  }
}

Task WindowSync::phase_done(int phase) {
  const uint64_t target = seq_ * kPhases + static_cast<uint64_t>(phase);
  const int me = op_.rank();
  control_[me].progress.store(target, std::memory_order_release);
  for (int p = 0; p < op_.size(); ++p) {
    if (p == me) continue;
    const auto& progress = control_[p].progress;
    co_await op_.wait_until(p, plan_.read_bytes, [&progress, target] { return progress.load(std::memory_order_acquire) >= target; });
  }
}

}  // namespace fsdp
