#include "runtime/overlap.h"

#include <algorithm>

namespace fsdp::runtime {

void OverlapMeter::compute(TimePoint start, TimePoint end) {
  std::lock_guard lock(mu_);
  compute_.push_back({start, end});
}

void OverlapMeter::communication(CollectiveKind collective, TimePoint start, TimePoint end) {
  std::lock_guard lock(mu_);
  comm_[std::string(name(collective))].push_back({start, end});
}

std::map<std::string, OverlapMeter::Share> OverlapMeter::shares() const {
  std::lock_guard lock(mu_);
  std::vector<Interval> compute = compute_;
  std::sort(compute.begin(), compute.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::map<std::string, Share> out;
  for (const auto& [kind, intervals] : comm_) {
    Share& s = out[kind];
    for (const Interval& c : intervals) {
      s.seconds += std::chrono::duration<double>(c.end - c.start).count();
      // Compute intervals are disjoint: the hidden part is the sum of the intersections.
      auto it = std::lower_bound(compute.begin(), compute.end(), c.start,
                                 [](const Interval& x, TimePoint t) { return x.end < t; });
      for (; it != compute.end() && it->start < c.end; ++it) {
        const TimePoint from = std::max(it->start, c.start), to = std::min(it->end, c.end);
        if (to > from) s.hidden_seconds += std::chrono::duration<double>(to - from).count();
      }
    }
  }
  return out;
}

OverlapMeter::Share OverlapMeter::total() const {
  Share all;
  for (const auto& [kind, share] : shares()) {
    all.seconds += share.seconds;
    all.hidden_seconds += share.hidden_seconds;
  }
  return all;
}

void OverlapMeter::clear() {
  std::lock_guard lock(mu_);
  compute_.clear();
  comm_.clear();
}

}  // namespace fsdp::runtime
