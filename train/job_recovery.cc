#include "train/job_recovery.h"

#include <algorithm>
#include <cstdio>

#include "collectives/types/errors.h"
#include "common/fault_injection.h"
#include "runtime/live_reshard.h"

namespace fsdp::train {
namespace {

using Clock = std::chrono::steady_clock;

// The planner's peak of `config` on `mesh` with `redundancy` against this host (TrainConfig's fit), or the
// refusal.
std::string fit_problem(const TrainConfig& config, const spec::Mesh& mesh, spec::Redundancy redundancy) {
  TrainConfig c = config;
  c.resolved_mesh = mesh;
  c.parallelism.data_parallel_replicate_degree = mesh.replicate_degree();
  c.parallelism.data_parallel_shard_degree = mesh.shard_degree();
  c.fault_tolerance.redundancy = redundancy;
  try {
    c.check_fits_machine_memory();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return s;
}

runtime::HeldShard shards_held_by(Trainer& t, int source_rank) {
  return [&t, source_rank](int unit, int old_rank, int what) -> std::span<const float> {
    if (old_rank == source_rank) {
      if (what == 0) return t.fsdp().unit(unit).master_shard();
      return t.optimizer().state(unit).at(static_cast<size_t>(what - 1));
    }
    runtime::BuddyMirror* mirror = t.mirror();
    if (mirror == nullptr || mirror->mirrored_rank() != old_rank) return {};
    if (what == 0) return mirror->params(unit);
    return mirror->state(unit).at(static_cast<size_t>(what - 1));
  };
}

std::string RecoveryRecord::line() const {
  char times[200];
  int n = std::snprintf(times, sizeof(times),
                        "detected %.3f s into the step; agree %.3f s, reconnect %.3f s, reshard %.3f s",
                        detected_into_step, agree_seconds, shrink_seconds, reshard_seconds);
  if (first_step_seconds >= 0 && n > 0 && n < static_cast<int>(sizeof(times))) {
    std::snprintf(times + n, sizeof(times) - static_cast<size_t>(n), ", first step after %.3f s", first_step_seconds);
  }
  return "recovery: rank" + std::string(lost.size() > 1 ? "s " : " ") + rank_list(lost) + " lost in step " +
         std::to_string(failed_step) + " (" + why + "); " + std::to_string(world_size) + " rank(s) go on in epoch " +
         std::to_string(epoch) + " from step " + std::to_string(resumed_after) + " as " + layout + " (" + times + ")";
}

std::string EpochLayout::describe() const {
  const std::string size = std::to_string(mesh.world_size()) + " rank" + (mesh.world_size() > 1 ? "s" : "");
  if (mesh.replicate_degree() > 1) {
    return "HSDP " + std::to_string(mesh.replicate_degree()) + " x " + std::to_string(mesh.shard_degree()) +
           " (the replicas are the redundancy)";
  }
  if (redundancy == spec::Redundancy::kBuddy && mesh.world_size() > 1) {
    return "FSDP over " + size + " with the buddy mirror";
  }
  return "FSDP over " + size + " without redundancy (" + (mirror_dropped ? "the buddy mirror does not fit; " : "") +
         "the next loss means a restart)";
}

EpochLayout plan_epoch(const TrainConfig& config, int world_size) {
  EpochLayout layout{spec::mesh_after_loss(config.mesh(), world_size)};
  layout.redundancy = config.fault_tolerance.effective_redundancy(layout.mesh);
  std::string problem = fit_problem(config, layout.mesh, layout.redundancy);
  if (!problem.empty() && layout.redundancy == spec::Redundancy::kBuddy &&
      fit_problem(config, layout.mesh, spec::Redundancy::kNone).empty()) {
    layout.redundancy = spec::Redundancy::kNone;
    layout.mirror_dropped = true;
    problem.clear();
  }
  if (!problem.empty()) {
    throw RecoveryImpossible("the job no longer fits at " + std::to_string(world_size) + " rank(s): " + problem);
  }
  return layout;
}

TrainerOptions options_for_epoch(const TrainerOptions& original, const EpochLayout& layout,
                                 const launch::ElasticWorld& ew) {
  const int64_t data_parallel_size = original.fsdp.mesh ? original.fsdp.mesh->data_parallel_size() : ew.original_size();
  TrainerOptions o = original;
  o.fsdp.mesh = layout.mesh;
  o.fsdp.policy.redundancy = layout.redundancy;
  o.fsdp.plan = nullptr;  // a plan file describes the original world
  o.data_parallel_size = data_parallel_size;
  o.data_ranks = ew.size() == data_parallel_size ? std::vector<int64_t>{}
                                                 : round_robin_data_ranks(data_parallel_size, ew.size(), ew.rank());
  return o;
}

HeldLayout held_layout(Trainer& t, const launch::ElasticWorld& ew) {
  return {ew.members(),      t.fsdp().mesh().shard_degree(), t.mirror() != nullptr, t.steps_done(),
          &t.fsdp().model(), shards_held_by(t, ew.rank())};
}

namespace {

// `from` as live_reshard sees it in the world of `d`: the old ranks still alive, and each new rank's old
// rank (-1: a newcomer, which only receives).
runtime::OldShards old_shards(const HeldLayout& from, const launch::RecoveryDecision& d) {
  runtime::OldShards old;
  old.old_size = static_cast<int64_t>(from.members.size());
  old.shard_degree = from.shard_degree;
  old.mirrored = from.mirrored;
  old.steps_taken = from.committed;
  for (int launch_rank : d.launch_ranks) {
    const auto at = std::find(from.members.begin(), from.members.end(), launch_rank);
    old.new_members.push_back(at == from.members.end() ? -1 : static_cast<int>(at - from.members.begin()));
    if (at != from.members.end()) old.survivors.push_back(old.new_members.back());
  }
  std::sort(old.survivors.begin(), old.survivors.end());
  return old;
}

// `why` and what failed after it.
void then(std::string& why, const std::string& failure) {
  why += (why.empty() ? "" : "; then during recovery: ") + failure;
}

// The rebuild of `from` in the epoch just entered, or the loss that interrupts it (a CommError).
std::unique_ptr<Trainer> rebuild(launch::ElasticWorld& ew, const HeldLayout& from, const EpochLayout& layout,
                                 const TrainerOptions& original, const BatchSource& batches) {
  auto fresh = std::make_unique<Trainer>(options_for_epoch(original, layout, ew), ew.comm(), batches);
  // The newcomer has no old model: the spec does not depend on the world size.
  runtime::live_reshard(old_shards(from, ew.entered()), from.model ? *from.model : fresh->fsdp().model(), from.held,
                        fresh->fsdp(), fresh->optimizer(), ew.comm());
  fresh->set_steps_done(from.committed);
  fresh->sync_redundancy();
  return fresh;
}

}  // namespace

std::unique_ptr<Trainer> change_epoch(const TrainConfig& config, launch::ElasticWorld& ew, const HeldLayout& from,
                                      const std::function<launch::RecoveryDecision()>& enter, fault::When point,
                                      int64_t point_step, const TrainerOptions& original, const BatchSource& batches,
                                      EpochChange& change) {
  for (bool first = true;; first = false) {  // a rank lost on the way: the next epoch, from the same `from`
    const auto agree_start = Clock::now();
    change.decision = first ? enter() : ew.shrink(from.committed, config.fault_tolerance.recovery_timeout);
    if (!ew.connect_failures().empty()) then(change.why, ew.connect_failures());
    change.agree_seconds += ew.last_agree_seconds();
    change.reconnect_seconds += seconds_since(agree_start) - ew.last_agree_seconds();
    const launch::RecoveryDecision& d = change.decision;
    change.lost.clear();
    for (int r : change.counted_on) {
      if (std::find(d.launch_ranks.begin(), d.launch_ranks.end(), r) == d.launch_ranks.end()) change.lost.push_back(r);
    }
    if (d.committed_step != from.committed) {
      throw RecoveryImpossible("the survivors disagree on the last committed step (" + std::to_string(from.committed) +
                               " here, " + std::to_string(d.committed_step) + " decided)");
    }
    if (static_cast<int64_t>(d.launch_ranks.size()) < config.fault_tolerance.min_world_size) {
      throw RecoveryImpossible(std::to_string(d.launch_ranks.size()) +
                               " rank(s) left, fewer than fault_tolerance.min_world_size = " +
                               std::to_string(config.fault_tolerance.min_world_size));
    }
    const EpochLayout layout = plan_epoch(config, ew.size());
    change.layout = layout.describe();
    fault::point(point, point_step);  // tests: a rank lost during the recovery or the grow
    const auto reshard_start = Clock::now();
    std::unique_ptr<Trainer> fresh;
    try {
      fresh = rebuild(ew, from, layout, original, batches);
    } catch (const runtime::UnrecoverableLoss& e) {
      throw RecoveryImpossible(e.what());  // the same on every rank, before any message
    } catch (const CommError& e) {
      then(change.why, e.what());
    }
    // Every rank rebuilt, or every rank starts over from `from` (never some from the epoch's new state).
    if (ew.agree_rebuilt(fresh != nullptr)) {
      change.reshard_seconds = seconds_since(reshard_start);
      return fresh;
    }
    if (fresh) then(change.why, "a rank of epoch " + std::to_string(d.epoch) + " did not rebuild its state");
  }
}

std::unique_ptr<Trainer> recover_from_lost_rank(const TrainConfig& config, launch::ElasticWorld& ew,
                                                std::unique_ptr<Trainer> old, const TrainerOptions& original,
                                                const BatchSource& batches, const std::string& why,
                                                RecoveryRecord& record) {
  const auto start = Clock::now();
  record.failed_step = old->steps_done() + 1;
  // 1. The step in flight: every survivor reads the same decision; a kept step is applied from the
  // gradients this rank still holds (it voted, so it has them).
  if (ew.close(record.failed_step)) record.kept_step = old->apply_pending_step();
  // This rank's copies of the old shards: its own and its mirror's (the other replicas send their own).
  const HeldLayout from = held_layout(*old, ew);
  record.resumed_after = from.committed;
  EpochChange change;
  change.counted_on = from.members;
  change.why = why;
  change.agree_seconds = seconds_since(start);  // resolving the step in flight
  const auto shrink = [&] { return ew.shrink(from.committed, config.fault_tolerance.recovery_timeout); };
  auto fresh =
      change_epoch(config, ew, from, shrink, fault::When::kInRecovery, record.failed_step, original, batches, change);
  record.note(change);
  old.reset();
  ew.release_retired();
  return fresh;
}

void RecoveryRecord::note(const EpochChange& change) {
  why = change.why;
  lost = change.lost;
  epoch = change.decision.epoch;
  world_size = static_cast<int>(change.decision.launch_ranks.size());
  layout = change.layout;
  agree_seconds = change.agree_seconds;
  shrink_seconds = change.reconnect_seconds;
  reshard_seconds = change.reshard_seconds;
}

}  // namespace fsdp::train
