#include "runtime/lifecycle_trace.h"

#include "common/memory_tracker.h"
#include "runtime/fsdp_model.h"

namespace fsdp::runtime {

std::vector<LifecycleEvent> trace_lifecycle(Communicator& world, int units, const spec::Policy& policy, int steps) {
  spec::ModelSpec model;
  model.name = "lifecycle_trace";
  for (int u = 0; u < units; ++u) {
    spec::UnitSpec unit;
    unit.name = "unit" + std::to_string(u);
    unit.params.push_back({unit.name + ".weight", {8}, DataType::kFloat32});
    model.units.push_back(unit);
  }
  MemoryTracker tracker;
  FsdpModel fsdp(model, FsdpOptions{std::nullopt, policy, nullptr}, world, tracker);
  std::vector<LifecycleEvent> events;
  int step = 0;
  char phase = 'f';
  fsdp.set_issue_observer(
      [&](CollectiveKind kind, int u) { events.push_back({step, phase, std::string(name(kind)), u}); });
  fsdp.set_comm_observer([&](CollectiveKind kind, std::string_view, int u, auto, auto, int64_t) {
    if (kind == CollectiveKind::kAllGather || kind == CollectiveKind::kReduceScatter) {
      events.push_back({step, phase, std::string(name(kind)) + "_done", u});
    }
  });
  for (step = 1; step <= steps; ++step) {
    phase = 'f';
    for (int u = 0; u < units; ++u) {
      fsdp.pre_forward(u);
      fsdp.post_forward(u);
    }
    phase = 'b';
    for (int u = units - 1; u >= 0; --u) {
      fsdp.pre_backward(u);
      fsdp.grads(u);
      fsdp.post_backward(u);
    }
    fsdp.finalize_backward();
  }
  return events;
}

}  // namespace fsdp::runtime
