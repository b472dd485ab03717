#include "train/job_grow.h"

#include <cstdio>

#include "runtime/live_reshard.h"
#include "train/job_recovery.h"

namespace fsdp::train {
namespace {

using Clock = std::chrono::steady_clock;

// The old layout as the grow decision describes it: every member of the old world holds its own shard
// (under HSDP, the lowest member of each shard index sends it); new rank i is old rank i, the newcomers
// come after them. The old mesh is the one the job planned at the old size (plan_epoch), which a newcomer
// computes as the members do.
runtime::OldShards old_layout(const TrainConfig& config, const launch::RecoveryDecision& d) {
  runtime::OldShards old;
  old.old_size = static_cast<int64_t>(d.survivors.size());
  old.shard_degree = plan_epoch(config, static_cast<int>(old.old_size)).mesh.shard_degree();
  old.survivors = d.survivors;
  old.steps_taken = d.committed_step;
  old.new_members = d.survivors;
  old.new_members.resize(d.launch_ranks.size(), -1);
  return old;
}

std::unique_ptr<Trainer> rebuild(const TrainConfig& config, launch::ElasticWorld& ew,
                                 const launch::RecoveryDecision& d, const TrainerOptions& original, const BatchSource& batches,
                                 const runtime::HeldShard& held, const spec::ModelSpec* old_model, GrowRecord& record) {
  const auto start = Clock::now();
  const EpochLayout layout = plan_epoch(config, ew.size());
  auto fresh = std::make_unique<Trainer>(options_for_epoch(original, layout, ew), ew.comm(), batches);
  // The newcomer has no old model: the spec does not depend on the world size.
  runtime::live_reshard(old_layout(config, d), old_model ? *old_model : fresh->fsdp().model(), held, fresh->fsdp(),
                        fresh->optimizer(), ew.comm());
  fresh->set_steps_done(d.committed_step);
  fresh->sync_redundancy();
  record.reshard_seconds = seconds_since(start);
  record.after_step = d.committed_step;
  record.epoch = d.epoch;
  record.world_size = static_cast<int>(d.launch_ranks.size());
  record.joined.assign(d.launch_ranks.begin() + static_cast<std::ptrdiff_t>(d.survivors.size()), d.launch_ranks.end());
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
                                  const TrainerOptions& original, const BatchSource& batches, GrowRecord& record,
                                  std::chrono::milliseconds timeout) {
  record.started = Clock::now();
  const int source_rank = ew.rank();
  const launch::RecoveryDecision d = ew.grow(old->steps_done(), timeout);
  record.agree_seconds = ew.last_agree_seconds();
  record.reconnect_seconds = seconds_since(record.started) - record.agree_seconds;
  auto fresh = rebuild(config, ew, d, original, batches, shards_held_by(*old, source_rank), &old->fsdp().model(), record);
  old.reset();
  ew.release_retired();
  return fresh;
}

std::unique_ptr<Trainer> join_job(const TrainConfig& config, launch::ElasticWorld& ew, const TrainerOptions& original,
                                  const BatchSource& batches, GrowRecord& record) {
  record.started = Clock::now();
  const runtime::HeldShard nothing = [](int, int, int) { return std::span<const float>(); };
  return rebuild(config, ew, ew.last_grow(), original, batches, nothing, nullptr, record);
}

bool joined_as_newcomer(const launch::ElasticWorld& ew) {
  const launch::RecoveryDecision& d = ew.last_grow();
  return d.epoch == ew.epoch() && d.epoch > 0 && ew.rank() >= static_cast<int>(d.survivors.size());
}

}  // namespace fsdp::train
