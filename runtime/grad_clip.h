// Gradient clipping over shards: torch.nn.utils.clip_grad_norm_ for gradients one rank holds as its
// shards of the units' flat gradients. The one implementation both front ends call: fsdp-train through
// FsdpModel::clip_grad_norm, fully_shard through fsdp_runtime.clip_grad_norm_ (python/fsdp_runtime/csrc).
//
//   norm = (sum of |g|^p over every gradient element g)^(1/p)        p = inf: max |g|
//
// What each rank passes:
//   shards      its shards of the units' gradients (padding zero), each element of the model held by one
//               rank of `shard_group`: the shard-group reduce (sum, or max for inf) counts it once. Under
//               HSDP every replica holds the same shards after the replica all-reduce (FsdpUnit), so the
//               shard group alone gives the global norm; under expert parallelism the dense shard group's
//               ranks hold every expert's shard once (EP rank x place in the expert FSDP group).
//   replicated  tensors every rank holds whole and alike (fully_shard: parameters no unit took): added
//               after the reduce, once.
#pragma once

#include <span>

#include "collectives/communicator.h"

namespace fsdp::runtime {

// sum |g|^p (p = inf: max |g|) of this rank's values, accumulated in double in order. InvalidArgument
// unless norm_type > 0 (inf included).
double grad_norm_term(std::span<const std::span<const float>> values, double norm_type);

// The total norm (above); collective over shard_group (one float64 all-reduce). shard_group null: the
// shards are whole (one rank). Non-finite gradients give a non-finite norm.
double total_grad_norm(std::span<const std::span<const float>> shards,
                       std::span<const std::span<const float>> replicated, Communicator* shard_group, double norm_type);

// The factor clipping multiplies every gradient by at this norm, fp32: max_norm / (norm + 1e-6) when the
// norm is finite and above max_norm, else 1 (max_norm <= 0: no clipping). A copy of a gradient shard taken
// before clipping (BuddyMirror::begin_exchange) is clipped bitwise alike with it.
float clip_scale(double norm, double max_norm);

// g *= scale for every element (nothing when scale is 1).
void scale_grads(std::span<const std::span<float>> grads, float scale);

// total_grad_norm, then scale_grads(clip_scale(norm, max_norm)) over shards and replicated. Collective
// over shard_group. Returns the norm before clipping.
double clip_grad_norm(std::span<const std::span<float>> shards, std::span<const std::span<float>> replicated,
                      Communicator* shard_group, double max_norm, double norm_type = 2.0);

}  // namespace fsdp::runtime
