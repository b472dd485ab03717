// Deterministic parameter initialisation: every value is a pure function of (seed, parameter name,
// element index), so it is the same whichever process, thread or shard computes it.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/dims.h"
#include "spec/model_spec.h"

namespace fsdp::model {

// How matrices are drawn; vectors (the RMSNorm weights) are always 1.
//   kTorchTitan: TorchTitan's Transformer.init_weights (llama3, depth_init = True): tok_embeddings
//     N(0, 1); wq, wk, wv, w1 N(0, 0.02); the output projections wo, w2 (and w3) of layer l
//     N(0, 0.02 / sqrt(2 (l + 1))); output N(0, dim^-1/2) truncated at 3 standard deviations.
//   kNormal: N(0, 0.02) for every matrix.
// TorchTitan truncates its 0.02 draws at +-2 (100 sd): no draw here ever reaches that.
enum class InitScheme { kTorchTitan, kNormal };
InitScheme parse_init_scheme(std::string_view s);  // "torchtitan", "normal"; throws std::invalid_argument

// The normal distribution one matrix is drawn from.
struct InitDistribution {
  double stddev = 0.02;
  double cutoff = 0;  // > 0: draws beyond +-cutoff are drawn again
};
InitDistribution init_distribution(const spec::ParamSpec& p, InitScheme scheme);

// Fills elements [first, first + count) of p's row-major flattening into out[0, count): a rank can
// initialise just its shard. Throws std::out_of_range if the range leaves the parameter.
void init_parameter_range(const spec::ParamSpec& p, uint64_t seed, int64_t first, int64_t count, float* out,
                          InitScheme scheme = InitScheme::kNormal);

// Every parameter of the unit, out_params[i] holding unit.params[i].numel() floats.
void init_parameters(const spec::UnitSpec& unit, Grads out_params, uint64_t seed,
                     InitScheme scheme = InitScheme::kNormal);

}  // namespace fsdp::model
