#include "train/job_grow.h"

#include <algorithm>
#include <cstdio>

#include "runtime/live_reshard.h"
#include "train/job_recovery.h"

namespace fsdp::train {
namespace {

using Clock = std::chrono::steady_clock;

// The grow after the committed step `from` stands at, entered through `enter` (the members' agreement, or
// the join already done): a GrowRecord when every member and newcomer reached the grown epoch, else the
// recovery it turned into.
std::unique_ptr<Trainer> grow(const TrainConfig& config, launch::ElasticWorld& ew, const HeldLayout& from,
                              const std::function<launch::RecoveryDecision()>& enter, Clock::time_point started,
                              const TrainerOptions& original, const BatchSource& batches, GrowOutcome& outcome) {
  EpochChange change;
  const auto entered = [&] {
    const launch::RecoveryDecision d = enter();
    change.counted_on = ew.last_grow().launch_ranks;  // the members, then the newcomers the grow admitted
    return d;
  };
  auto fresh = change_epoch(config, ew, from, entered, fault::When::kInGrow, from.committed, original, batches, change);
  const launch::RecoveryDecision& d = change.decision;
  if (change.lost.empty()) {
    GrowRecord& g = outcome.grown.emplace();
    g.started = started;
    g.agree_seconds = change.agree_seconds;
    g.reconnect_seconds = change.reconnect_seconds;
    g.reshard_seconds = change.reshard_seconds;
    g.after_step = d.committed_step;
    g.epoch = d.epoch;
    g.world_size = static_cast<int>(d.launch_ranks.size());
    g.joined.assign(d.launch_ranks.begin() + static_cast<std::ptrdiff_t>(d.survivors.size()), d.launch_ranks.end());
    return fresh;
  }
  RecoveryRecord& r = outcome.recovered.emplace();
  change.why = "in the grow after step " + std::to_string(from.committed) + ": " + change.why;
  r.note(change);
  r.failed_step = r.resumed_after = from.committed;  // no step was interrupted: the grow after it was
  r.detected = started;
  r.detected_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
                    seconds_since(started);
  return fresh;
}

}  // namespace

std::string GrowRecord::line() const {
  char times[160];
  int n = std::snprintf(times, sizeof(times), "agree %.3f s, reconnect %.3f s, reshard %.3f s", agree_seconds,
                        reconnect_seconds, reshard_seconds);
  if (first_step_seconds >= 0 && n > 0 && n < static_cast<int>(sizeof(times))) {
    std::snprintf(times + n, sizeof(times) - static_cast<size_t>(n), ", first step after %.3f s", first_step_seconds);
  }
  return "grow: rank" + std::string(joined.size() > 1 ? "s " : " ") + rank_list(joined) + " joined after step " +
         std::to_string(after_step) + "; " + std::to_string(world_size) + " rank(s) go on in epoch " +
         std::to_string(epoch) + " (" + times + ")";
}

std::unique_ptr<Trainer> grow_job(const TrainConfig& config, launch::ElasticWorld& ew, std::unique_ptr<Trainer> old,
                                  const TrainerOptions& original, const BatchSource& batches, GrowOutcome& outcome,
                                  std::chrono::milliseconds timeout) {
  const auto started = Clock::now();
  const HeldLayout from = held_layout(*old, ew);
  auto fresh = grow(
      config, ew, from, [&] { return ew.grow(from.committed, timeout); }, started, original, batches, outcome);
  old.reset();
  ew.release_retired();
  return fresh;
}

std::unique_ptr<Trainer> join_job(const TrainConfig& config, launch::ElasticWorld& ew, const TrainerOptions& original,
                                  const BatchSource& batches, GrowOutcome& outcome) {
  // The pre-grow layout, as the members planned it at their size; the newcomer holds none of it.
  const launch::RecoveryDecision& admitted = ew.last_grow();
  HeldLayout from;
  from.members.assign(admitted.launch_ranks.begin(),
                      admitted.launch_ranks.begin() + static_cast<std::ptrdiff_t>(admitted.survivors.size()));
  const EpochLayout old = plan_epoch(config, static_cast<int>(from.members.size()));
  from.shard_degree = old.mesh.shard_degree();
  from.mirrored = old.redundancy == spec::Redundancy::kBuddy && from.members.size() > 1;  // as Trainer's
  from.committed = admitted.committed_step;
  from.held = [](int, int, int) { return std::span<const float>(); };
  auto fresh = grow(
      config, ew, from, [&] { return ew.entered(); }, Clock::now(), original, batches, outcome);
  ew.release_retired();
  return fresh;
}

bool joined_as_newcomer(const launch::ElasticWorld& ew) {
  // Its admission's epoch, or a later one where a rank was lost before the grown world connected.
  const launch::RecoveryDecision& d = ew.last_grow();
  const auto newcomers = d.launch_ranks.begin() + static_cast<std::ptrdiff_t>(d.survivors.size());
  return d.epoch > 0 && std::find(newcomers, d.launch_ranks.end(), ew.original_rank()) != d.launch_ranks.end();
}

}  // namespace fsdp::train
