#include "spec/job_spec.h"

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "spec/spec_error.h"

namespace fsdp::spec {

std::pair<int64_t, int64_t> resolve_degrees(int64_t replicate, int64_t shard, int64_t world_size) {
  const std::string ws = std::to_string(world_size);
  if (replicate == kRestOfWorld && shard == kRestOfWorld) {
    throw SpecError(
        "parallelism.data_parallel_replicate_degree and parallelism.data_parallel_shard_degree are both -1: at most "
        "one may take the rest of the world");
  }
  for (auto [given, rest, given_key, rest_key] :
       {std::tuple{replicate, &shard, "replicate", "shard"}, std::tuple{shard, &replicate, "shard", "replicate"}}) {
    if (*rest != kRestOfWorld) continue;
    if (given < 1 || world_size % given != 0) {
      throw SpecError(std::string("parallelism.data_parallel_") + rest_key + "_degree = -1: world size " + ws +
                      " is not divisible by parallelism.data_parallel_" + given_key +
                      "_degree = " + std::to_string(given) + " (pick a divisor of " + ws + ")");
    }
    *rest = world_size / given;
  }
  check_mesh_fills_world(replicate, shard, world_size);
  return {replicate, shard};
}

void check_mesh_fills_world(int64_t replicate, int64_t shard, int64_t world_size) {
  if (replicate * shard == world_size) return;
  throw SpecError("parallelism.data_parallel_replicate_degree (" + std::to_string(replicate) +
                  ") x parallelism.data_parallel_shard_degree (" + std::to_string(shard) +
                  ") = " + std::to_string(replicate * shard) + ", but the world size is " + std::to_string(world_size) +
                  " (set one of them to -1 to take the rest)");
}

void check_reshard_group(const Reshard& reshard, int64_t shard_degree) {
  if (reshard.mode != Reshard::Mode::kGroup) return;
  if (reshard.group > 0 && reshard.group <= shard_degree && shard_degree % reshard.group == 0) return;
  throw SpecError("parallelism.fsdp_reshard_after_forward = " + std::to_string(reshard.group) +
                  " must divide parallelism.data_parallel_shard_degree = " + std::to_string(shard_degree));
}

void check_expert_parallel_degree(int64_t ep, int64_t shard_degree) {
  const std::string key = "parallelism.expert_parallel_degree = " + std::to_string(ep);
  if (ep < 1) throw SpecError(key + " must be at least 1");
  if (shard_degree % ep != 0) {
    throw SpecError(key + " must divide the data-parallel shard degree " + std::to_string(shard_degree) +
                    " (the experts' FSDP degree is shard degree / expert_parallel_degree)");
  }
}

void check_expert_parallel(const ModelSpec& model, int64_t ep, int64_t shard_degree) {
  const std::string key = "parallelism.expert_parallel_degree = " + std::to_string(ep);
  if (ep == 1) return;
  if (ep > 1 && !model.dims.moe.enabled()) {
    throw SpecError(key + " needs a MoE model; '" + model.name + "' has no experts");
  }
  check_expert_parallel_degree(ep, shard_degree);
  const int64_t experts = model.dims.moe.num_experts;
  if (experts % ep != 0) {
    throw SpecError(key + " must divide the number of experts " + std::to_string(experts) + " of '" + model.name + "'");
  }
}

void check_fault_tolerance(const JobSpec& job) {
  const FaultTolerance& ft = job.fault_tolerance;
  validate(ft, job.mesh.world_size());
  const Redundancy kept = ft.effective_redundancy(job.mesh);
  if (job.policy.redundancy != kept) {
    const bool hsdp = job.mesh.replicate_degree() > 1;
    throw SpecError("policy.redundancy = " + std::string(name(job.policy.redundancy)) +
                    " but the [fault_tolerance] section keeps " + std::string(name(kept)) +
                    (hsdp ? " on HSDP (replicate " + std::to_string(job.mesh.replicate_degree()) +
                                ": the replicas hold every shard; fault_tolerance.redundancy = buddy turns the "
                                "mirror on once a loss leaves plain FSDP)"
                          : ""));
  }
  if (!ft.enable) return;
  // In-job recovery re-plans FSDP and HSDP meshes (mesh_after_loss); expert groups are not rebuilt yet.
  if (job.mesh.expert_parallel_degree() > 1) {
    throw SpecError("fault_tolerance.enable = true needs parallelism.expert_parallel_degree = 1 (it is " +
                    std::to_string(job.mesh.expert_parallel_degree()) +
                    "): recovery does not rebuild expert groups yet");
  }
}

void validate(const JobSpec& job) {
  std::vector<std::string> problems;
  const auto collect = [&](const std::function<void()>& rule) {
    try {
      rule();
    } catch (const SpecError& e) {
      problems.emplace_back(e.what());
    }
  };
  const int64_t shard = job.mesh.shard_degree();
  collect([&] { validate(job.model); });
  collect([&] { validate(job.policy, shard); });
  collect([&] { check_expert_parallel(job.model, job.mesh.expert_parallel_degree(), shard); });
  collect([&] { check_fault_tolerance(job); });
  if (problems.empty()) return;
  std::string all = problems.front();
  for (size_t i = 1; i < problems.size(); ++i) all += "\n" + problems[i];
  throw SpecError(all);
}

}  // namespace fsdp::spec
