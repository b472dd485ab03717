#include "sharding/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "sharding/cost_model.h"
#include "sharding/schedule_sim.h"
#include "spec/expert_parallel.h"
#include "spec/mxfp8_wire.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

int64_t grad_accum_for(int64_t global_batch, int64_t world_size, int64_t micro_batch) {
  if (global_batch <= 0) throw spec::SpecError("global batch must be >= 1 (got " + std::to_string(global_batch) + ")");
  if (micro_batch <= 0) throw spec::SpecError("micro-batch must be >= 1 (got " + std::to_string(micro_batch) + ")");
  const int64_t per_step = world_size * micro_batch;
  if (global_batch % per_step != 0) {
    throw spec::SpecError("global batch " + std::to_string(global_batch) + " is not a multiple of world size " +
                          std::to_string(world_size) + " x micro-batch " + std::to_string(micro_batch) + " = " +
                          std::to_string(per_step));
  }
  return global_batch / per_step;
}

spec::ModelSpec rank_units(const spec::ModelSpec& model, const spec::Mesh& mesh) {
  return spec::expert_parallel_units(model, mesh.expert_parallel_degree(), 0, mesh.shard_degree());
}

std::vector<spec::UnitShardLayout> shard_rank_units(const spec::ModelSpec& rank_units, const spec::Mesh& mesh) {
  return spec::shard_expert_parallel_units(rank_units, mesh.shard_degree(), mesh.expert_parallel_degree());
}

Plan make_plan(const spec::ModelSpec& model, const ChipProfile& chip, const spec::Mesh& mesh,
               const spec::Policy& policy, double headroom) {
  validate(model);
  validate(chip);
  validate(policy, mesh.shard_degree());
  if (!(headroom >= 0 && headroom < 1)) {
    throw spec::SpecError("headroom must be in [0, 1) (got " + std::to_string(headroom) + ")");
  }
  spec::ModelSpec units = rank_units(model, mesh);
  auto layouts = shard_rank_units(units, mesh);
  Plan plan{model, mesh, chip, policy, headroom, std::move(layouts), {}, {}, std::move(units), {}};
  plan.estimate = estimate_plan(plan.rank_model, plan.units, chip, mesh, policy, headroom, &plan.schedule);

  auto& notes = plan.notes;
  std::ostringstream s;
  if (!model.dims.known()) {
    notes.push_back("model spec gives no transformer dims: activations not estimated, FLOPs from parameters only");
  }
  int64_t padding = 0;
  int64_t flat = 0;
  for (const auto& u : plan.units) {
    padding += u.padding_numel();
    flat += u.flat_numel();
  }
  if (padding > 0) {
    s.str("");
    s.precision(3);
    s << "padding to the shard degree adds " << padding << " elements ("
      << 100.0 * static_cast<double>(padding) / static_cast<double>(flat) << "% of the flat buffers)";
    notes.push_back(s.str());
  }
  if (mesh.shard_level() == spec::LinkLevel::kInter) {
    notes.push_back("shard group spans " + std::to_string(mesh.nodes_spanned_by_block(mesh.shard_degree())) +
                    " servers: all-gathers and reduce-scatters are bound by the inter-server network");
  }
  if (const int64_t ep = mesh.expert_parallel_degree(); ep > 1) {
    s.str("");
    s << "expert parallelism " << ep << ": each rank holds " << model.dims.moe.num_experts / ep << " of "
      << model.dims.moe.num_experts << " experts per block, sharded over " << mesh.expert_shard_degree()
      << " ranks; tokens exchanged by all-to-all over " << ep << " ranks (" << name(mesh.expert_parallel_level())
      << "-server), blocking, assuming balanced routing";
    notes.push_back(s.str());
  }
  if (mesh.replicate_degree() > 1) {
    notes.push_back("HSDP: gradients all-reduced over " + std::to_string(mesh.replicate_degree()) + " replicas (" +
                    std::string(name(mesh.replicate_level())) + "-server links)");
  }
  const auto& e = plan.estimate;
  if (!e.fits) {
    s.str("");
    s.precision(4);
    s << "does not fit: peak " << static_cast<double>(e.memory.peak()) / kGiB << " GiB > "
      << static_cast<double>(e.available_bytes) / kGiB << " GiB available (" << chip.memory_bytes / kGiB << " GiB less "
      << headroom * 100 << "% headroom)";
    notes.push_back(s.str());
  }
  return plan;
}

}  // namespace fsdp::sharding
