#include "redundancy_support.h"

#include <cstring>

#include "runtime/flat_copy.h"

namespace fsdp::testing {

std::unique_ptr<runtime::ShardedOptimizer> make_optimizer(runtime::FsdpModel& model, bool sgd, MemoryTracker& tracker) {
  if (sgd) return std::make_unique<runtime::SgdMomentum>(model, runtime::SgdConfig{0.9, 0.01}, tracker);
  return std::make_unique<runtime::AdamW>(model, runtime::AdamWConfig{0.9, 0.95, 1e-8, 0.01}, tracker);
}

std::unique_ptr<MirroredRun> make_mirrored_run(Communicator& world, bool sgd, bool mirrored,
                                               const std::optional<spec::Mesh>& mesh) {
  auto run = std::make_unique<MirroredRun>();
  runtime::FsdpOptions options;
  options.policy.param_dtype = DataType::kFloat32;
  options.mesh = mesh;
  if (mirrored) options.policy.redundancy = spec::Redundancy::kBuddy;
  run->model = std::make_unique<runtime::FsdpModel>(run->toy.spec(), options, world, run->tracker);
  run->model->init_parameters([&](int u, std::span<float* const> p) { run->toy.init(u, p); });
  run->opt = make_optimizer(*run->model, sgd, run->tracker);
  if (!mirrored) return run;
  run->mirror = std::make_unique<runtime::BuddyMirror>(*run->model, *run->opt, run->tracker);
  run->mirror->sync();
  return run;
}

void mirrored_step(MirroredRun& run, Communicator& world, int step, int64_t global_batch, double max_norm,
                   bool exchange_after_clip) {
  const ToyModel& toy = run.toy;
  runtime::FsdpModel& fsdp = *run.model;
  const int64_t local = global_batch / world.size();
  const int64_t in = toy.widths.front(), out = toy.widths.back();
  std::vector<std::vector<float>> acts(static_cast<size_t>(toy.units() + 1));
  std::vector<float> target(static_cast<size_t>(local * out)), dy(target.size()), dx;
  acts[0].resize(static_cast<size_t>(local * in));
  for (int64_t i = 0; i < local; ++i) {
    toy.sample(step * global_batch + world.rank() * local + i, &acts[0][i * in], &target[i * out]);
  }
  for (int u = 0; u < toy.units(); ++u) {
    toy.forward(u, fsdp.pre_forward(u), acts[u], acts[u + 1], local);
    fsdp.post_forward(u);
  }
  for (size_t i = 0; i < target.size(); ++i) dy[i] = (acts.back()[i] - target[i]) / static_cast<float>(local);
  for (int u = toy.units() - 1; u >= 0; --u) {
    const auto w = fsdp.pre_backward(u);  // before grads(u): the order the planner replays
    toy.backward(u, w, fsdp.grads(u), acts[u], acts[u + 1], dy, dx, local);
    dy.swap(dx);
    fsdp.post_backward(u);
  }
  fsdp.finalize_backward();
  if (run.mirror && !exchange_after_clip) run.mirror->begin_exchange();
  const double norm = fsdp.clip_grad_norm(max_norm);
  if (run.mirror && !exchange_after_clip) run.mirror->end_exchange(runtime::FsdpModel::clip_scale(norm, max_norm));
  if (run.mirror && exchange_after_clip) run.mirror->exchange_grads();
  run.opt->step(fsdp, 0.05, [&](int u) { fsdp.prefetch_next_step(u); });
  if (run.mirror) run.mirror->apply(0.05);
  fsdp.zero_grad();
}

int64_t mirror_mismatches(MirroredRun& run, int what) {
  runtime::BuddyMirror& mirror = *run.mirror;
  Communicator& comm = *run.model->groups().shard_gather;
  int64_t wrong = 0;
  for (int u = 0; u < run.model->num_units(); ++u) {
    std::span<float> copy = what == 0 ? mirror.params(u) : mirror.state(u)[static_cast<size_t>(what - 1)];
    std::span<const float> own =
        what == 0 ? run.model->unit(u).master_shard() : run.opt->state(u)[static_cast<size_t>(what - 1)];
    std::vector<float> got(own.size());
    Work r = comm.recv(got.data(), got.size(), DataType::kFloat32, mirror.mirror_holder());
    Work s = comm.send(copy.data(), copy.size(), DataType::kFloat32, mirror.mirrored_rank());
    r.wait();
    s.wait();
    for (size_t i = 0; i < own.size(); ++i) wrong += std::memcmp(&got[i], &own[i], sizeof(float)) != 0;
  }
  return wrong;
}

std::vector<std::vector<float>> gather_whole(runtime::FsdpModel& model, runtime::ShardedOptimizer& opt, int what) {
  std::vector<std::vector<float>> out;
  Communicator& comm = *model.groups().shard_gather;
  for (int u = 0; u < model.num_units(); ++u) {
    const auto& layout = model.unit(u).layout();
    std::span<const float> mine =
        what == 0 ? model.unit(u).master_shard() : opt.state(u)[static_cast<size_t>(what - 1)];
    std::vector<float> flat(static_cast<size_t>(layout.flat_numel()));
    comm.all_gather(mine.data(), flat.data(), mine.size(), DataType::kFloat32).wait();
    auto& whole = out.emplace_back(static_cast<size_t>(layout.numel()));
    runtime::copy_out(layout, flat.data(), DataType::kFloat32, whole.data());
  }
  return out;
}

}  // namespace fsdp::testing
