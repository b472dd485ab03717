#include "runtime/fsdp_schedule.h"

#include <algorithm>
#include <numeric>

namespace fsdp::runtime {

FsdpSchedule FsdpSchedule::fixed(int num_units) {
  FsdpSchedule s;
  s.fixed_ = true;
  s.last_order_.resize(static_cast<size_t>(std::max(num_units, 0)));
  std::iota(s.last_order_.begin(), s.last_order_.end(), 0);
  s.post_order_ = s.last_order_;
  return s;
}

std::span<const int> FsdpSchedule::neighbours(const std::vector<int>& order, int u, int direction, int64_t prefetch) {
  prefetch_.clear();
  const auto n = static_cast<int64_t>(order.size());
  int64_t at = u;  // the fixed order is 0..n-1
  if (!fixed_) at = std::find(order.begin(), order.end(), u) - order.begin();
  if (at < 0 || at >= n) return {};
  for (int64_t k = 1; k <= prefetch; ++k) {
    const int64_t next = at + direction * k;
    if (next < 0 || next >= n) break;
    prefetch_.push_back(order[static_cast<size_t>(next)]);
  }
  return prefetch_;
}

std::span<const int> FsdpSchedule::pre_forward(int u, int64_t prefetch) {
  if (depth_ > 0 && u == root_) depth_ = 0;  // its previous forward raised (a root never nests in itself)
  if (depth_ == 0) {
    root_ = u;
    if (!fixed_) {
      order_.clear();
      post_order_.clear();
      prefetched_.clear();
    }
  }
  ++depth_;
  if (fixed_) return neighbours(last_order_, u, +1, prefetch);
  order_.push_back(u);
  const auto out = neighbours(last_order_, u, +1, prefetch);
  prefetched_.insert(prefetched_.end(), out.begin(), out.end());
  return out;
}

FsdpSchedule::AfterForward FsdpSchedule::post_forward(int u, const spec::Reshard& reshard, bool backward_follows) {
  if (depth_ > 0) --depth_;
  bool last = false;  // its backward runs next: the root, or the last unit of the fixed order
  if (fixed_) {
    last = !last_order_.empty() && u == last_order_.back();
  } else {
    post_order_.push_back(u);
    last = depth_ == 0;
    if (last) last_order_ = order_;
  }
  if (!backward_follows) return AfterForward::kFree;
  // Reshard::reshards by position in forward order: a last unit keeps its parameters unless "always".
  if (!reshard.reshards(last ? 1 : 0, 2)) return AfterForward::kKeep;
  return reshard.mode == spec::Reshard::Mode::kGroup ? AfterForward::kKeepSlice : AfterForward::kFree;
}

std::vector<int> FsdpSchedule::unused_prefetches() const {
  std::vector<int> out;
  for (int v : prefetched_) {
    if (std::find(order_.begin(), order_.end(), v) == order_.end() &&
        std::find(out.begin(), out.end(), v) == out.end()) {
      out.push_back(v);
    }
  }
  return out;
}

std::span<const int> FsdpSchedule::pre_backward(int u, int64_t prefetch) {
  backward_started_ = true;
  backward_units_.push_back(u);
  return neighbours(post_order_, u, -1, prefetch);
}

FsdpSchedule::Reduce FsdpSchedule::post_backward(int u, bool sync) {
  if (!sync) return {};
  const Reduce r{true, pending_reduce_};
  pending_reduce_ = u;
  return r;
}

int FsdpSchedule::finish_backward() {
  const int pending = pending_reduce_;
  pending_reduce_ = -1;
  backward_started_ = false;
  backward_units_.clear();
  return pending;
}

void FsdpSchedule::discard_step() {
  finish_backward();
  depth_ = 0;
}

bool FsdpSchedule::next_step_gathers(int u, int64_t prefetch) const {
  if (prefetch <= 0) return false;
  const auto at = fixed_ ? int64_t{u} : std::find(last_order_.begin(), last_order_.end(), u) - last_order_.begin();
  return at >= 0 && at <= prefetch && at < static_cast<int64_t>(last_order_.size());
}

}  // namespace fsdp::runtime
