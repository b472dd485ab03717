#include "collectives/algorithms/window_sync.h"

#include "collectives/core/errors.h"

namespace fsdp {

WindowSync::WindowSync(Op& op, WindowPlan plan)
    : op_(op), plan_(std::move(plan)), control_(plan_.table ? plan_.table->control() : nullptr),
      seq_(op.context().seq + 1) {}

Task WindowSync::agree() {
  const int n = op_.size();
  const int me = op_.rank();
  if (!control_) co_return;  // released by an abort, or never shared: the caller falls back
  WindowPost& mine = control_[me].post[seq_ % 2];
  mine.read = plan_.read;
  mine.read_bytes = plan_.read_bytes;
  mine.result = plan_.needs_result ? plan_.result : WindowRef{};
  mine.result_bytes = plan_.result_bytes;
  mine.seq.store(seq_, std::memory_order_release);

  bool all = true;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const WindowPost& post = control_[p].post[seq_ % 2];
    co_await op_.wait_until(p, plan_.read_bytes, [&post, s = seq_] { return post.seq.load(std::memory_order_acquire) == s; });
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
    if (post.read_bytes != plan_.read_bytes || (plan_.needs_result && post.result_bytes != plan_.result_bytes)) {
      throw CommError(ctx, "message size mismatch: rank " + std::to_string(p) + " posted " +
                               std::to_string(post.read_bytes) + " bytes, rank " + std::to_string(me) + " expected " +
                               std::to_string(plan_.read_bytes) + " (do the ranks pass the same count?)");
    }
    std::string error;
    read_[p] = plan_.table->peer_address(p, post.read, post.read_bytes, error);
    if (read_[p] && plan_.needs_result) result_[p] = plan_.table->peer_address(p, post.result, post.result_bytes, error);
    if (!read_[p] || (plan_.needs_result && !result_[p])) throw CommError(ctx, error);
  }
  windowed_ = true;
  plan_.table->count_windowed_run();
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
