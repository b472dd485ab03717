#include "checkpoint_support.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "runtime/flat_copy.h"

namespace fsdp::testing {

ToyJob::ToyJob(Communicator& w, int64_t replicate, bool sgd, ToyModel t) : world(w), toy(std::move(t)) {
  runtime::FsdpOptions o;
  o.mesh = spec::Mesh::for_world(w.size(), replicate);
  o.policy.param_dtype = DataType::kFloat32;
  fsdp = std::make_unique<runtime::FsdpModel>(toy.spec(), o, world, tracker);
  fsdp->init_parameters([&](int u, std::span<float* const> p) { toy.init(u, p); });
  if (sgd) {
    opt = std::make_unique<runtime::SgdMomentum>(*fsdp, runtime::SgdConfig{0.9, 0.01}, tracker);
  } else {
    opt = std::make_unique<runtime::AdamW>(*fsdp, runtime::AdamWConfig{0.9, 0.95, 1e-8, 0.01}, tracker);
  }
}

double ToyJob::step(int64_t s) {
  constexpr int64_t kGlobalBatch = 24;
  const int n = world.size();
  const int64_t local = kGlobalBatch / n;
  const int64_t in = toy.widths.front(), out = toy.widths.back();
  std::vector<std::vector<float>> acts(static_cast<size_t>(toy.units() + 1));
  std::vector<float> target(static_cast<size_t>(local * out));
  acts[0].resize(static_cast<size_t>(local * in));
  for (int64_t i = 0; i < local; ++i) toy.sample(s * kGlobalBatch + world.rank() * local + i, &acts[0][i * in], &target[i * out]);
  for (int u = 0; u < toy.units(); ++u) {
    auto w = fsdp->pre_forward(u);
    toy.forward(u, w, acts[u], acts[u + 1], local);
    fsdp->post_forward(u);
  }
  std::vector<float> dy(target.size()), dx;
  double loss = 0;
  for (size_t i = 0; i < target.size(); ++i) {
    const double d = acts.back()[i] - target[i];
    loss += 0.5 * d * d / static_cast<double>(local);
    dy[i] = static_cast<float>(d / static_cast<double>(local));
  }
  for (int u = toy.units() - 1; u >= 0; --u) {
    auto w = fsdp->pre_backward(u);
    toy.backward(u, w, fsdp->grads(u), acts[u], acts[u + 1], dy, dx, local);
    dy.swap(dx);
    fsdp->post_backward(u);
  }
  fsdp->finalize_backward();
  double global = 0;
  world.all_reduce(&loss, &global, 1, DataType::kFloat64, ReduceOp{ReduceKind::kAvg, 1.0}).wait();
  fsdp->clip_grad_norm(0.5);
  opt->step(*fsdp, 0.05);
  fsdp->zero_grad();
  return global;
}

std::vector<std::vector<std::vector<float>>> ToyJob::full_state() {
  std::vector<std::vector<std::vector<float>>> out;
  Communicator& group = *fsdp->groups().shard_gather;
  for (int u = 0; u < fsdp->num_units(); ++u) {
    const auto& layout = fsdp->unit(u).layout();
    std::vector<std::span<float>> shards{fsdp->unit(u).master_shard()};
    for (auto s : opt->state(u)) shards.push_back(s);
    std::vector<std::vector<float>> unit;
    for (auto shard : shards) {
      std::vector<float> flat(static_cast<size_t>(layout.flat_numel()));
      float* mine = flat.data() + group.rank() * layout.chunk_numel();
      std::copy(shard.begin(), shard.end(), mine);
      group.all_gather(mine, flat.data(), static_cast<size_t>(layout.chunk_numel()), DataType::kFloat32).wait();
      std::vector<float> full(static_cast<size_t>(layout.numel()));
      runtime::copy_out(layout, flat.data(), DataType::kFloat32, full.data());
      unit.push_back(std::move(full));
    }
    out.push_back(std::move(unit));
  }
  return out;
}

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TMPDIR");
  path_ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/fsdp-ckpt-test-" + std::to_string(::getpid()) + "-" +
          std::to_string(counter++);
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace fsdp::testing
