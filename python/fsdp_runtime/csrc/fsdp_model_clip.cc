#include "python/fsdp_runtime/csrc/fsdp_model_clip.h"

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "common/memory_tracker.h"
#include "runtime/fsdp_model.h"

namespace fsdp::torch_backend {

ClipResult fsdp_model_clip_grad_norm(Communicator& world, int64_t replicate,
                                     const std::vector<std::vector<std::vector<int64_t>>>& units,
                                     const std::vector<std::vector<float>>& grads, double max_norm, double norm_type) {
  if (units.size() != grads.size()) {
    throw InvalidArgument("fsdp_model_clip_grad_norm: " + std::to_string(units.size()) + " units but " +
                          std::to_string(grads.size()) + " gradients");
  }
  spec::ModelSpec model;
  model.name = "clip_grad_norm";
  for (size_t u = 0; u < units.size(); ++u) {
    spec::UnitSpec unit;
    unit.name = "unit" + std::to_string(u);
    for (size_t i = 0; i < units[u].size(); ++i) {
      unit.params.push_back({unit.name + ".p" + std::to_string(i), units[u][i], DataType::kFloat32});
    }
    if (static_cast<int64_t>(grads[u].size()) != unit.numel()) {
      throw InvalidArgument("fsdp_model_clip_grad_norm: unit " + std::to_string(u) + " has " +
                            std::to_string(unit.numel()) + " parameter values but " + std::to_string(grads[u].size()) +
                            " gradient values");
    }
    model.units.push_back(unit);
  }
  MemoryTracker tracker;
  runtime::FsdpOptions options;
  options.mesh = spec::Mesh::for_world(world.size(), replicate);
  runtime::FsdpModel fsdp(model, options, world, tracker);
  const int n = fsdp.num_units();
  for (int u = 0; u < n; ++u) {
    fsdp.pre_forward(u);
    fsdp.post_forward(u);
  }
  for (int u = n - 1; u >= 0; --u) {
    fsdp.pre_backward(u);
    const auto& flat = grads[static_cast<size_t>(u)];
    const auto views = fsdp.grads(u);
    size_t offset = 0;
    for (size_t i = 0; i < views.size(); ++i) {
      const auto numel = static_cast<size_t>(model.units[static_cast<size_t>(u)].params[i].numel());
      std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(offset), numel, views[i]);
      offset += numel;
    }
    fsdp.post_backward(u);
  }
  fsdp.finalize_backward();
  ClipResult result;
  result.norm = fsdp.clip_grad_norm(max_norm, norm_type);
  for (int u = 0; u < n; ++u) {
    const auto shard = fsdp.unit(u).grad_shard();
    result.shards.emplace_back(shard.begin(), shard.end());
  }
  return result;
}

}  // namespace fsdp::torch_backend
