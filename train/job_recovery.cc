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

std::unique_ptr<Trainer> recover_from_lost_rank(const TrainConfig& config, launch::ElasticWorld& ew,
                                                std::unique_ptr<Trainer> old, const TrainerOptions& original,
                                                const BatchSource& batches, const std::string& why,
                                                RecoveryRecord& record) {
  const auto start = Clock::now();
  record.why = why;
  record.failed_step = old->steps_done() + 1;
  // 1. The step in flight: every survivor reads the same decision; a kept step is applied from the
  // gradients this rank still holds (it voted, so it has them).
  if (ew.close(record.failed_step)) record.kept_step = old->apply_pending_step();
  const int64_t committed = old->steps_done();
  record.resumed_after = committed;
  const std::vector<int> source_members = ew.members();  // the old trainer's layout, by original rank
  const int source_rank = ew.rank();
  // This rank's copies of the old shards: its own and its mirror's (the other replicas send their own).
  const runtime::HeldShard held = shards_held_by(*old, source_rank);
  for (;;) {  // a member lost during recovery starts the next epoch from the same old state
    const auto agree_start = Clock::now();
    const launch::RecoveryDecision d = ew.shrink(committed, config.fault_tolerance.recovery_timeout);
    // Resolving the step in flight and agreeing; then reconnecting.
    record.agree_seconds = std::chrono::duration<double>(agree_start - start).count() + ew.last_agree_seconds();
    record.shrink_seconds = seconds_since(agree_start) - ew.last_agree_seconds();
    record.epoch = d.epoch;
    record.world_size = static_cast<int>(d.survivors.size());
    record.lost.clear();
    std::vector<int> survivors_in_source;  // old ranks (indices into source_members) still alive, ascending
    for (size_t i = 0; i < source_members.size(); ++i) {
      if (std::find(d.launch_ranks.begin(), d.launch_ranks.end(), source_members[i]) != d.launch_ranks.end()) {
        survivors_in_source.push_back(static_cast<int>(i));
      } else {
        record.lost.push_back(source_members[i]);
      }
    }
    if (d.committed_step != committed) {
      throw RecoveryImpossible("the survivors disagree on the last committed step (" + std::to_string(committed) +
                               " here, " + std::to_string(d.committed_step) + " decided)");
    }
    if (static_cast<int64_t>(d.survivors.size()) < config.fault_tolerance.min_world_size) {
      throw RecoveryImpossible(std::to_string(d.survivors.size()) +
                               " rank(s) left, fewer than fault_tolerance.min_world_size = " +
                               std::to_string(config.fault_tolerance.min_world_size));
    }
    const EpochLayout layout = plan_epoch(config, ew.size());
    record.layout = layout.describe();
    fault::point(fault::When::kInRecovery, record.failed_step);  // tests: a survivor lost during recovery
    const auto reshard_start = Clock::now();
    try {
      auto fresh = std::make_unique<Trainer>(options_for_epoch(original, layout, ew), ew.comm(), batches);
      const runtime::OldShards shards{static_cast<int64_t>(source_members.size()), survivors_in_source, committed,
                                      old->fsdp().mesh().shard_degree(), old->mirror() != nullptr};
      runtime::live_reshard(shards, old->fsdp().model(), held, fresh->fsdp(), fresh->optimizer(), ew.comm());
      fresh->set_steps_done(committed);
      fresh->sync_redundancy();
      record.reshard_seconds = seconds_since(reshard_start);
      old.reset();
      ew.release_retired();
      return fresh;
    } catch (const runtime::UnrecoverableLoss& e) {
      throw RecoveryImpossible(e.what());
    } catch (const CommError& e) {
      record.why += "; then during recovery: " + std::string(e.what());
    }
  }
}

}  // namespace fsdp::train
