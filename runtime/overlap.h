// How much communication ran while the training thread computed: the figure FSDP's prefetching is for.
// Compute intervals come from the training thread (disjoint, in order); communication intervals from
// the collectives' start and finish times on the progress engine.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/types/collective_kind.h"

namespace fsdp::runtime {

class OverlapMeter {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  void compute(TimePoint start, TimePoint end);
  // One collective's flight (CommObserver's): every all-gather (forward, backward, group) counts as
  // kind "all_gather"; the others ("reduce_scatter", "all_reduce") by their name.
  void communication(CollectiveKind collective, TimePoint start, TimePoint end);

  struct Share {
    double seconds = 0;         // total time the collectives of this kind were in flight
    double hidden_seconds = 0;  // of which the training thread was computing
    double hidden_fraction() const { return seconds > 0 ? hidden_seconds / seconds : 0; }
  };
  // Per kind; thread-safe against concurrent recording.
  std::map<std::string, Share> shares() const;
  // Every kind together: the share of all flight time hidden (a step's figure in metrics.jsonl).
  Share total() const;
  void clear();

 private:
  struct Interval {
    TimePoint start, end;
  };
  mutable std::mutex mu_;
  std::vector<Interval> compute_;
  std::map<std::string, std::vector<Interval>> comm_;
};

}  // namespace fsdp::runtime
