// fsdp-mirror-bench: what buddy redundancy (runtime/buddy_mirror.h, docs/fault_tolerance.md) costs per
// step on a model's shapes, ranks as processes over shared memory (one core each), from rank 0:
//   - exchange_grads (the rank's fp32 grad shard to its mirror holder, the buddy's received, one packed
//     message each way) and, for comparison, the same sent as one message per unit;
//   - apply (the mirror's AdamW update), against the owner's own optimizer.step;
//   - the gradient reduce-scatters of every unit (the step's own traffic, for scale);
//   - the mirror's tracked peak against the planner's (MemoryEstimate::redundancy + 2 x redundancy_grads:
//     the received shard and the packed copy sent, at the exchange).
// No forward or backward runs: the gradients are set to fixed values, which is all the mirror reads.
// Medians over --iters iterations after 3 warm-up ones.
//
//   fsdp-mirror-bench [--model debugmodel_byte] [--nproc 2] [--iters 50] [--transport shm]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "bench/forked_rank.h"
#include "launch/fork_ranks.h"
#include "launch/store.h"
#include "launch/world.h"
#include "runtime/buddy_mirror.h"
#include "runtime/fsdp_model.h"
#include "runtime/optimizer.h"
#include "sharding/planner.h"

namespace {

using namespace fsdp;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "debugmodel_byte";
  int nproc = 2;
  int iters = 50;
  std::string transport = "shm";
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median seconds of fn over iters (after 3 warm-up calls), every rank in step (a barrier before each).
double time_it(Communicator& comm, int iters, const std::function<void()>& fn) {
  std::vector<double> s;
  for (int i = 0; i < iters + 3; ++i) {
    comm.barrier().wait();
    const auto t0 = Clock::now();
    fn();
    if (i >= 3) s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(s);
}

// The alternative BuddyMirror does not take: one message per unit each way, straight from the grad shards
// into a receive buffer (no packed copy), every message in flight before any wait.
void exchange_per_unit(runtime::FsdpModel& model, Communicator& comm, std::vector<float>& in) {
  const int s = comm.size();
  std::vector<Work> works;
  size_t at = 0;
  for (int u = 0; u < model.num_units(); ++u) {
    const auto g = std::as_const(model.unit(u)).grad_shard();
    works.push_back(comm.recv(in.data() + at, g.size(), DataType::kFloat32, (comm.rank() + 1) % s));
    works.push_back(comm.send(g.data(), g.size(), DataType::kFloat32, (comm.rank() - 1 + s) % s));
    at += g.size();
  }
  for (auto& w : works) w.wait();
}

int run_rank(const Options& opt, int rank, const launch::StoreServer& store, const std::string& result) {
  launch::World world = bench::connect_forked_rank(rank, opt.nproc, store, opt.transport);
  const spec::ModelSpec spec = spec::model_preset(opt.model);
  MemoryTracker tracker;
  runtime::FsdpOptions fo;
  fo.policy.param_dtype = DataType::kFloat32;  // configs/debug_model.toml's
  runtime::FsdpModel model(spec, fo, *world.comm, tracker);
  runtime::AdamW adamw(model, runtime::AdamWConfig{}, tracker);
  runtime::BuddyMirror mirror(model, adamw, tracker);
  mirror.sync();
  int64_t shard = 0;
  for (int u = 0; u < model.num_units(); ++u) {
    auto g = model.unit(u).grad_shard();
    for (size_t i = 0; i < g.size(); ++i) g[i] = 1e-3f * static_cast<float>((i * 7 + u) % 13) - 6e-3f;
    shard += static_cast<int64_t>(g.size());
  }
  Communicator& comm = *world.comm;
  const double t_exchange = time_it(comm, opt.iters, [&] { mirror.exchange_grads(); });
  std::vector<float> in(static_cast<size_t>(shard));
  const double t_per_unit =
      time_it(comm, opt.iters, [&] { exchange_per_unit(model, *model.groups().shard_reduce, in); });
  std::vector<double> applies;  // apply alone, after an exchange
  for (int i = 0; i < opt.iters + 3; ++i) {
    mirror.exchange_grads();
    const auto t0 = Clock::now();
    mirror.apply(1e-4, 1);
    if (i >= 3) applies.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double t_apply = median(applies);
  const double t_step = time_it(comm, opt.iters, [&] { adamw.step(model, 1e-4); });
  std::vector<std::vector<float>> flat;
  for (int u = 0; u < model.num_units(); ++u)
    flat.emplace_back(static_cast<size_t>(model.unit(u).layout().flat_numel()), 1.0f);
  const double t_reduce = time_it(comm, opt.iters, [&] {
    std::vector<Work> w;
    for (int u = 0; u < model.num_units(); ++u) {
      const auto n = static_cast<size_t>(model.unit(u).layout().chunk_numel());
      w.push_back(model.groups().shard_reduce->reduce_scatter(flat[u].data(), flat[u].data() + n * comm.rank(), n,
                                                              DataType::kFloat32, ReduceOp{ReduceKind::kAvg, 1.0}));
    }
    for (auto& x : w) x.wait();
  });
  if (rank != 0) return 0;
  spec::Policy policy = fo.policy;
  policy.redundancy = spec::Redundancy::kBuddy;
  const auto plan = sharding::make_plan(spec, sharding::chip_preset("cpu"), model.mesh(), policy);
  std::ofstream f(result);
  f.precision(9);
  f << t_exchange << ' ' << t_per_unit << ' ' << t_apply << ' ' << t_step << ' ' << t_reduce << ' ' << shard << ' '
    << tracker.peak(MemoryCategory::kRedundancy) << ' '
    << plan.estimate.memory.redundancy + 2 * plan.estimate.memory.redundancy_grads << ' ' << model.num_units() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      opt.model = v;
    else if (k == "--nproc")
      opt.nproc = std::stoi(v);
    else if (k == "--iters")
      opt.iters = std::stoi(v);
    else if (k == "--transport")
      opt.transport = v;
    else {
      std::cerr << "usage: fsdp-mirror-bench [--model NAME] [--nproc N] [--iters N] [--transport T]\n";
      return 2;
    }
  }
  const std::string result = "/tmp/fsdp-mirror-bench." + std::to_string(::getpid());
  launch::StoreServer store("127.0.0.1", 0);
  const auto codes = launch::fork_ranks(opt.nproc, std::chrono::minutes(5), [&](int rank) {
    bench::pin_to_core(rank);
    return run_rank(opt, rank, store, result);
  });
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] != 0) {
      std::cerr << "rank " << r << " exited with " << codes[r] << "\n";
      return 1;
    }
  }
  double ex = 0, per_unit = 0, apply = 0, step = 0, reduce = 0;
  int64_t shard = 0, tracked = 0, planned = 0, units = 0;
  std::ifstream in(result);
  if (!(in >> ex >> per_unit >> apply >> step >> reduce >> shard >> tracked >> planned >> units)) {
    std::cerr << "rank 0 wrote no result\n";
    return 1;
  }
  std::remove(result.c_str());
  std::printf("buddy mirror, %s at %d ranks (%s), %lld shard elements in %lld units, medians of %d\n",
              opt.model.c_str(), opt.nproc, opt.transport.c_str(), static_cast<long long>(shard),
              static_cast<long long>(units), opt.iters);
  std::printf("  exchange_grads (packed)       %9.3f ms (copy in included)\n", ex * 1e3);
  std::printf("  one message per unit instead  %9.3f ms\n", per_unit * 1e3);
  std::printf("  apply (the mirror's AdamW)    %9.3f ms\n", apply * 1e3);
  std::printf("  = mirror cost per step        %9.3f ms (exchange_grads + apply)\n", (ex + apply) * 1e3);
  std::printf("  own optimizer.step (AdamW)    %9.3f ms\n", step * 1e3);
  std::printf("  reduce-scatters, every unit   %9.3f ms\n", reduce * 1e3);
  std::printf("  mirror memory: tracked peak %lld B, planned %lld B\n", static_cast<long long>(tracked),
              static_cast<long long>(planned));
  return 0;
}
