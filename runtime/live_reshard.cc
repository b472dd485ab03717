#include "runtime/live_reshard.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/memory_tracker.h"
#include "runtime/flat_copy.h"
#include "spec/shard_layout.h"

namespace fsdp::runtime {
namespace {

bool alive(const OldShards& old, int rank) {
  return std::binary_search(old.survivors.begin(), old.survivors.end(), rank);
}

// The new rank of survivor `old_rank` (a holder).
int new_rank_of(const OldShards& old, int old_rank) {
  const std::vector<int>& order = old.new_members.empty() ? old.survivors : old.new_members;
  return static_cast<int>(std::find(order.begin(), order.end(), old_rank) - order.begin());
}

// Old shard j of the unit holds real rows of some parameter (otherwise it is padding: zeros).
bool has_real_rows(const spec::UnitShardLayout& layout, int64_t j) {
  for (const auto& p : layout.params()) {
    if (p.rows_of(j).size() > 0) return true;
  }
  return false;
}

// new_members names each survivor once and newcomers as -1.
bool members_match(const OldShards& old) {
  if (old.new_members.empty()) return true;
  std::vector<int> olds;
  for (int m : old.new_members) {
    if (m >= 0)
      olds.push_back(m);
    else if (m != -1)
      return false;
  }
  std::sort(olds.begin(), olds.end());
  return olds == old.survivors;
}

int64_t new_size(const OldShards& old) {
  return static_cast<int64_t>(old.new_members.empty() ? old.survivors.size() : old.new_members.size());
}

void check_arguments(const OldShards& old, const FsdpModel& target, const Communicator& new_world) {
  std::ostringstream why;
  if (old.survivors.empty() || !std::is_sorted(old.survivors.begin(), old.survivors.end()) ||
      std::adjacent_find(old.survivors.begin(), old.survivors.end()) != old.survivors.end() ||
      old.survivors.front() < 0 || old.survivors.back() >= old.old_size) {
    why << "survivors must be distinct old ranks in [0, " << old.old_size << "), ascending";
  } else if (!members_match(old)) {
    why << "new_members must name each survivor once and newcomers as -1";
  } else if (new_size(old) != new_world.size()) {
    why << new_size(old) << " members (" << old.survivors.size() << " survivors) but a new world of "
        << new_world.size();
  } else if (old.old_size % old.shards() != 0) {
    why << "an old world of " << old.old_size << " ranks is no whole number of shard groups of " << old.shards();
  } else if (target.expert_parallel() != 1 || target.mesh().world_size() != new_world.size()) {
    why << "the target must be FSDP or HSDP over the new world (" << target.mesh().replicate_degree() << " x "
        << target.mesh().shard_degree() << ", expert parallel " << target.expert_parallel() << ")";
  }
  if (!why.str().empty()) throw std::invalid_argument("live_reshard: " + why.str());
}

// Old ranks r, r + S, ... holding shard j: "2" in plain FSDP, "0, 2" in HSDP 2 x 2.
std::string ranks_of_shard(const OldShards& old, int j) {
  std::string ranks;
  for (int64_t r = j; r < old.old_size; r += old.shards()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return ranks;
}

void check_recoverable(const OldShards& old, const spec::ModelSpec& model) {
  std::ostringstream lost;
  for (size_t u = 0; u < model.units.size(); ++u) {
    const spec::UnitShardLayout layout(model.units[u], old.shards());
    std::string ranks;
    for (int j = 0; j < old.shards(); ++j) {
      if (shard_holder(old, j) < 0 && has_real_rows(layout, j)) {
        ranks += (ranks.empty() ? "" : "; ") + ranks_of_shard(old, j);
      }
    }
    if (!ranks.empty()) lost << "; unit " << u << " (" << model.units[u].name << "): old ranks " << ranks;
  }
  if (!lost.str().empty()) {
    const bool replicas = old.old_size > old.shards();
    throw UnrecoverableLoss(std::string("live_reshard: every copy (") +
                            (replicas       ? "one per replica"
                             : old.mirrored ? "the shard and its buddy mirror"
                                            : "the only one: no redundancy") +
                            ") of old shards is lost" + lost.str() + " (old world " + std::to_string(old.old_size) +
                            "; restart from the checkpoint)");
  }
}

// Every shard this survivor must send is there, agreed over the new world before any broadcast.
void check_held(const OldShards& old, const spec::ModelSpec& model, const HeldShard& held, int whats,
                Communicator& new_world) {
  const int me = old_rank_of(old, new_world.rank());
  std::string missing;
  for (size_t u = 0; u < model.units.size() && missing.empty(); ++u) {
    const spec::UnitShardLayout layout(model.units[u], old.shards());
    for (int j = 0; j < old.shards() && missing.empty(); ++j) {
      const ShardSource source = shard_source(old, j);
      if (source.holder != me || !has_real_rows(layout, j)) continue;
      for (int w = 0; w < whats; ++w) {
        const size_t got = held(static_cast<int>(u), source.owner, w).size();
        if (got != static_cast<size_t>(layout.chunk_numel())) {
          missing = "unit " + std::to_string(u) + " old rank " + std::to_string(source.owner) + "'s shard what " +
                    std::to_string(w) + ": holds " + std::to_string(got) + " elements, want " +
                    std::to_string(layout.chunk_numel());
          break;
        }
      }
    }
  }
  int32_t bad = missing.empty() ? 0 : 1, any = 0;
  new_world.all_reduce(&bad, &any, 1, DataType::kInt32, ReduceOp{ReduceKind::kMax, 1.0}).wait();
  if (any != 0) {
    throw std::invalid_argument("live_reshard: old rank " + std::to_string(me) +
                                (missing.empty() ? std::string(": a peer lacks a shard it should hold")
                                                 : ": lacks a shard it should hold, " + missing));
  }
}

// The old unit whole for one `what`, in the old flat (rank-major) layout: old shard j broadcast from the
// new rank of its holder into chunk j; padding-only shards stay zero.
void gather_old(const OldShards& old, const spec::UnitShardLayout& layout, const HeldShard& held, int unit, int what,
                Communicator& new_world, float* flat) {
  const int me = old_rank_of(old, new_world.rank());
  const auto chunk = static_cast<size_t>(layout.chunk_numel());
  std::vector<Work> works;
  for (int j = 0; j < old.shards(); ++j) {
    if (!has_real_rows(layout, j)) continue;
    const ShardSource source = shard_source(old, j);
    const int root = new_rank_of(old, source.holder);
    float* dst = flat + static_cast<size_t>(j) * chunk;
    const void* src = source.holder == me ? static_cast<const void*>(held(unit, source.owner, what).data()) : dst;
    works.push_back(new_world.broadcast(src, dst, chunk, DataType::kFloat32, root));
  }
  for (auto& w : works) w.wait();
}

}  // namespace

int old_rank_of(const OldShards& old, int new_rank) {
  const auto i = static_cast<size_t>(new_rank);
  return old.new_members.empty() ? old.survivors.at(i) : old.new_members.at(i);
}

ShardSource shard_source(const OldShards& old, int j) {
  const int64_t s = old.shards();
  for (int64_t r = j; r < old.old_size; r += s) {
    if (alive(old, static_cast<int>(r))) return {static_cast<int>(r), static_cast<int>(r)};
  }
  if (old.mirrored && s > 1) {
    for (int64_t r = j; r < old.old_size; r += s) {
      const int64_t holder = r - j + (j - 1 + s) % s;  // r's predecessor in its shard group
      if (alive(old, static_cast<int>(holder))) return {static_cast<int>(holder), static_cast<int>(r)};
    }
  }
  return {};
}

void live_reshard(const OldShards& old, const spec::ModelSpec& model, const HeldShard& held, FsdpModel& target,
                  ShardedOptimizer& target_opt, Communicator& new_world) {
  check_arguments(old, target, new_world);
  check_recoverable(old, model);
  const int whats = 1 + target_opt.state_count();
  check_held(old, model, held, whats, new_world);
  target.discard_step();
  MemoryTracker scratch;  // transient, outside the rank's tracked step: recovery, not training
  for (int u = 0; u < target.num_units(); ++u) {
    const spec::UnitShardLayout layout(model.units[static_cast<size_t>(u)], old.shards());
    FsdpUnit& unit = target.unit(u);
    if (layout.numel() != unit.layout().numel()) {
      throw std::invalid_argument("live_reshard: unit " + std::to_string(u) + " has " + std::to_string(layout.numel()) +
                                  " elements in the old model, " + std::to_string(unit.layout().numel()) +
                                  " in the target");
    }
    TrackedBuffer<float> flat(scratch, MemoryCategory::kOther, static_cast<size_t>(layout.flat_numel()));
    TrackedBuffer<float> full(scratch, MemoryCategory::kOther, static_cast<size_t>(layout.numel()));
    const std::vector<std::span<float>> state = target_opt.state(u);
    for (int w = 0; w < whats; ++w) {
      std::memset(flat.data(), 0, flat.size() * sizeof(float));
      gather_old(old, layout, held, u, w, new_world, flat.data());
      copy_out(layout, flat.data(), DataType::kFloat32, full.data());
      if (w == 0) {
        unit.load_full(full.data());
      } else {
        std::span<float> dst = state[static_cast<size_t>(w - 1)];
        std::fill(dst.begin(), dst.end(), 0.0f);
        extract_chunk(unit.layout(), unit.shard_rank(), full.data(), dst.data());
      }
    }
  }
  target_opt.set_steps_taken(old.steps_taken);
}

}  // namespace fsdp::runtime
