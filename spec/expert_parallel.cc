#include "spec/expert_parallel.h"

#include <string>

#include "spec/job_spec.h"
#include "spec/spec_error.h"

namespace fsdp::spec {

ModelSpec expert_parallel_units(const ModelSpec& model, int64_t ep, int64_t ep_rank, int64_t shard_degree) {
  check_expert_parallel(model, ep, shard_degree);
  if (ep == 1) return model;
  if (ep_rank < 0 || ep_rank >= ep) {
    throw SpecError("expert-parallel rank " + std::to_string(ep_rank) + " outside the group of " + std::to_string(ep));
  }
  const int64_t local = model.dims.moe.num_experts / ep;
  ModelSpec out = model;
  out.units.clear();
  for (const UnitSpec& unit : model.units) {
    UnitSpec dense = unit;
    dense.params.clear();
    UnitSpec experts{.name = unit.name + ".moe.experts", .is_layer = false, .params = {}, .experts = true};
    int64_t expert_param = 0;  // index among the unit's expert parameters: expert = index / 3
    for (const ParamSpec& p : unit.params) {
      if (p.kind != ParamKind::kExpert) {
        dense.params.push_back(p);
        continue;
      }
      if (expert_param / 3 / local == ep_rank) experts.params.push_back(p);
      ++expert_param;
    }
    if (expert_param != 0 && expert_param != 3 * model.dims.moe.num_experts) {
      throw SpecError("unit '" + unit.name + "' has " + std::to_string(expert_param) +
                      " expert parameters; expert parallelism needs w1 w2 w3 of each of " +
                      std::to_string(model.dims.moe.num_experts) + " experts");
    }
    out.units.push_back(std::move(dense));
    if (expert_param != 0) out.units.push_back(std::move(experts));
  }
  return out;
}

std::vector<UnitShardLayout> shard_expert_parallel_units(const ModelSpec& units, int64_t shard_degree, int64_t ep) {
  if (ep < 1 || shard_degree % ep != 0) {
    throw SpecError("parallelism.expert_parallel_degree = " + std::to_string(ep) + " must divide the shard degree " +
                    std::to_string(shard_degree));
  }
  std::vector<UnitShardLayout> out;
  out.reserve(units.units.size());
  for (const UnitSpec& u : units.units) out.emplace_back(u, u.experts ? shard_degree / ep : shard_degree);
  return out;
}

}  // namespace fsdp::spec
