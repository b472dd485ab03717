// The C++ front end's gradient clipping over given gradients, for tests/python/test_clip_grad_norm.py
// to hold fully_shard's clip_grad_norm_ against (_C.fsdp_model_clip_grad_norm). No torch headers here
// (they cost ~20 s per translation unit): gradients cross as float lists.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/communicator.h"

namespace fsdp::torch_backend {

struct ClipResult {
  double norm = 0;                         // before clipping
  std::vector<std::vector<float>> shards;  // per unit: this rank's gradient shard after clipping
};

// Collective over `world`: FsdpModel over replicate x (world / replicate), one unit per entry of `units`
// (its parameters' shapes, float32); `grads[u]` this rank's full gradients of unit u (param-major, flat)
// go through the backward lifecycle (reduce-scatter, HSDP all-reduce), then
// FsdpModel::clip_grad_norm(max_norm, norm_type).
ClipResult fsdp_model_clip_grad_norm(Communicator& world, int64_t replicate,
                                     const std::vector<std::vector<std::vector<int64_t>>>& units,
                                     const std::vector<std::vector<float>>& grads, double max_norm, double norm_type);

}  // namespace fsdp::torch_backend
