// Expert parallelism as TorchTitan applies it to a MoE model: within each shard group, runs of `ep`
// consecutive ranks form an expert-parallel (EP) group that splits the experts (rank p of the group
// holds experts [p L, (p + 1) L), L = num_experts / ep) and exchanges token rows with all_to_all_v; the
// ranks holding the same experts (stride ep in the shard group, shard_degree / ep of them) shard those
// experts' weights FSDP-style. Everything else shards over the whole shard group as without EP.
//
//   shard group of S = 4, ep = 2:   ranks 0 1 | 2 3     EP groups {0, 1}, {2, 3}
//                                   expert FSDP groups {0, 2} (experts of EP rank 0), {1, 3}
#pragma once

#include <cstdint>
#include <vector>

#include "spec/model_spec.h"
#include "spec/shard_layout.h"

namespace fsdp::spec {

// The units a rank of EP rank `ep_rank` holds: each unit with routed experts (ParamKind::kExpert, 3 per
// expert in expert order) becomes that unit without them, followed by "<unit>.moe.experts" holding the
// rank's L experts (UnitSpec::experts). ep == 1 returns the model unchanged. Validates as above.
ModelSpec expert_parallel_units(const ModelSpec& model, int64_t ep, int64_t ep_rank, int64_t shard_degree);

// The layouts of those units as the runtime allocates them: expert units (UnitSpec::experts) sharded
// over the expert FSDP group of shard_degree / ep ranks, every other unit over the shard group.
std::vector<UnitShardLayout> shard_expert_parallel_units(const ModelSpec& units, int64_t shard_degree, int64_t ep);

}  // namespace fsdp::spec
