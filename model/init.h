// Deterministic parameter initialisation: every value is a pure function of (seed, parameter name,
// element index), so it is the same whichever process, thread or shard computes it.
#pragma once

#include <cstdint>

#include "model/dims.h"
#include "sharding/model_spec.h"

namespace fsdp::model {

// Matrices (rank >= 2): normal(0, stddev); vectors (the RMSNorm weights): 1.
// Fills elements [first, first + count) of p's row-major flattening into out[0, count): a rank can
// initialise just its shard. Throws std::out_of_range if the range leaves the parameter.
void init_parameter_range(const sharding::ParamSpec& p, uint64_t seed, int64_t first, int64_t count, float* out,
                          float stddev = 0.02f);

// Every parameter of the unit, out_params[i] holding unit.params[i].numel() floats.
void init_parameters(const sharding::UnitSpec& unit, Grads out_params, uint64_t seed, float stddev = 0.02f);

}  // namespace fsdp::model
