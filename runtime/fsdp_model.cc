#include "runtime/fsdp_model.h"

#include <stdexcept>

#include "collectives/kernels/reduce_kernels.h"
#include "runtime/flat_copy.h"
#include "runtime/grad_clip.h"
#include "runtime/plan_check.h"
#include "spec/expert_parallel.h"
#include "spec/job_spec.h"
#include "spec/spec_error.h"

namespace fsdp::runtime {
namespace {

spec::Mesh mesh_of(const FsdpOptions& o, const Communicator& world) {
  const spec::Mesh mesh = o.mesh ? *o.mesh : spec::Mesh::for_world(world.size(), 1);
  try {
    spec::check_mesh_fills_world(mesh.replicate_degree(), mesh.shard_degree(), world.size());
  } catch (const spec::SpecError& e) {
    throw InvalidArgument(std::string("fsdp: ") + e.what());
  }
  return mesh;
}

}  // namespace

FsdpModel::FsdpModel(const spec::ModelSpec& model, const FsdpOptions& options, Communicator& world,
                     MemoryTracker& tracker)
    : model_(model), full_model_(model), options_(options), tracker_(tracker) {
  const spec::Mesh mesh = mesh_of(options_, world);
  spec::JobSpec job{model_, options_.policy, mesh};
  // A policy with redundancy is a job whose [fault_tolerance] keeps it (the trainer checks the section
  // itself): its rules, plain FSDP among them, apply to the mesh here.
  job.fault_tolerance.enable = options_.policy.redundancy != spec::Redundancy::kNone;
  job.fault_tolerance.redundancy = options_.policy.redundancy;
  spec::validate(job);
  const int64_t ep = expert_parallel_ = mesh.expert_parallel_degree();
  if (ep > 1 && options_.policy.grad_comm == spec::CommPrecision::kMxfp8) {
    throw InvalidArgument("fsdp: MXFP8 gradient reduce-scatters (grad_comm = mxfp8) with "
                          "parallelism.expert_parallel_degree = " + std::to_string(ep) + " are not supported");
  }
  if (options_.plan) check_plan(*options_.plan, model_, mesh, options_.policy);
  const bool grouped = options_.policy.reshard.mode == spec::Reshard::Mode::kGroup;
  groups_ = ProcessGroups::create(world, mesh, grouped ? options_.policy.reshard.group : 0);
  if (ep > 1) {
    expert_groups_ = ProcessGroups::create_experts(world, mesh, ep);
    model_ = spec::expert_parallel_units(model_, ep, expert_groups_.expert_parallel->rank(), mesh.shard_degree());
  }
  for (size_t u = 0; u < model_.units.size(); ++u) {
    ProcessGroups& g = model_.units[u].experts ? expert_groups_ : groups_;
    units_.push_back(std::make_unique<FsdpUnit>(static_cast<int>(u), model_.units[u], options_.policy, g, tracker_));
  }
  schedule_ = FsdpSchedule::fixed(num_units());
}

void FsdpModel::init_parameters(const std::function<void(int unit, std::span<float* const> params)>& fn) {
  for (int u = 0; u < num_units(); ++u) {
    FsdpUnit& unit = *units_[static_cast<size_t>(u)];
    TrackedBuffer<float> full(tracker_, MemoryCategory::kOther, static_cast<size_t>(unit.layout().numel()));
    std::vector<float*> views;
    for (int64_t off : param_major_offsets(unit.layout())) views.push_back(full.data() + off);
    fn(u, views);
    unit.load_full(full.data());
  }
}

void FsdpModel::prefetch_next_step(int u) {
  if (schedule_.next_step_gathers(u, options_.policy.prefetch)) unit(u).start_unshard();
}

std::span<const float* const> FsdpModel::pre_forward(int u) {
  FsdpUnit& unit = this->unit(u);
  unit.start_unshard();  // first unit, or prefetch off
  for (int next : schedule_.pre_forward(u, options_.policy.prefetch)) this->unit(next).start_unshard();
  unit.wait_unshard();
  return unit.params();
}

void FsdpModel::post_forward(int u) {
  // The last unit runs backward right after forward, so it stays unsharded; "always" reshards it too
  // (one more all-gather per step, a lower peak).
  const auto after = schedule_.post_forward(u, options_.policy.reshard, /*backward_follows=*/true);
  if (after == FsdpSchedule::AfterForward::kKeep) return;
  unit(u).reshard(/*keep_for_backward=*/after == FsdpSchedule::AfterForward::kKeepSlice);
}

std::span<const float* const> FsdpModel::pre_backward(int u) {
  FsdpUnit& unit = this->unit(u);
  unit.start_unshard();
  for (int next : schedule_.pre_backward(u, options_.policy.prefetch)) this->unit(next).start_unshard();
  unit.wait_unshard();
  unit.grads();  // allocate (zeroed) or keep accumulating
  return unit.params();
}

void FsdpModel::post_backward(int u) {
  FsdpUnit& unit = this->unit(u);
  unit.reshard(false);
  const auto reduce = schedule_.post_backward(u, sync_grads_);
  if (!reduce.start) return;
  if (reduce.finish_first >= 0) this->unit(reduce.finish_first).finish_reduce_grads();
  unit.start_reduce_grads();
}

void FsdpModel::finalize_backward() {
  const int pending = schedule_.finish_backward();
  if (pending >= 0) unit(pending).finish_reduce_grads();
}

double FsdpModel::clip_grad_norm(double max_norm, double norm_type) {
  // Every unit's shard (expert units' too) reduced over the dense shard group: runtime/grad_clip.h says
  // why that counts each element once under HSDP and expert parallelism.
  std::vector<std::span<float>> shards;
  for (auto& unit : units_) shards.push_back(unit->grad_shard());
  return runtime::clip_grad_norm(shards, {}, groups_.shard_reduce.get(), max_norm, norm_type);
}

void FsdpModel::zero_grad() {
  for (auto& unit : units_) unit->zero_grad_shard();
}

void FsdpModel::discard_step() {
  for (auto& unit : units_) unit->release_transients();
  schedule_.discard_step();
}

std::vector<float> FsdpModel::gather_full_parameters(int u) {
  FsdpUnit& unit = this->unit(u);
  const auto& layout = unit.layout();
  std::vector<float> flat(static_cast<size_t>(layout.flat_numel()));
  const int64_t chunk = layout.chunk_numel();
  const ProcessGroups& g = model_.units[static_cast<size_t>(u)].experts ? expert_groups_ : groups_;
  float* mine = flat.data() + g.shard_rank() * chunk;
  std::copy(unit.master_shard().begin(), unit.master_shard().end(), mine);
  g.shard_gather->all_gather(mine, flat.data(), static_cast<size_t>(chunk), DataType::kFloat32).wait();
  std::vector<float> full(static_cast<size_t>(layout.numel()));
  copy_out(layout, flat.data(), DataType::kFloat32, full.data());
  return full;
}

void FsdpModel::set_comm_observer(CommObserver observer) {
  observer_ = std::move(observer);
  for (auto& unit : units_) unit->set_observer(&observer_);
}

void FsdpModel::set_issue_observer(IssueObserver observer) {
  issue_observer_ = std::move(observer);
  for (auto& unit : units_) unit->set_issue_observer(&issue_observer_);
}

}  // namespace fsdp::runtime
