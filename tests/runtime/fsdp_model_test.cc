// The FSDP engine against the unsharded truth: N-rank training (FSDP, HSDP, every reshard mode,
// prefetch depths, accumulation) must give the 1-rank run's losses and final parameters.
#include "runtime/fsdp_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "runtime/fsdp_unit.h"
#include "runtime/optimizer.h"
#include "runtime/process_groups.h"
#include "tests/collectives/test_support.h"
#include "tests/common/scoped_env.h"
#include "toy_model.h"

namespace fsdp::runtime {
namespace {

using testing::InProcJob;
using testing::ToyModel;

struct RunConfig {
  FsdpOptions fsdp;
  int steps = 4;
  int64_t global_batch = 24;
  int accum = 1;
  bool sgd = false;
  double max_norm = 0.5;
};

struct RunResult {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> params;  // per unit, param-major
  int64_t peak_all_gather = 0, peak_total = 0, leftover_transient = 0;
  int events_gather = 0, events_reduce = 0;
  uint64_t windowed = 0;  // collectives of the shard groups that ran over shared-memory windows
};

RunResult train(Communicator& world, const RunConfig& cfg) {
  ToyModel toy;
  MemoryTracker tracker;
  FsdpModel fsdp(toy.spec(), cfg.fsdp, world, tracker);
  RunResult result;
  std::mutex mu;
  fsdp.set_comm_observer([&](CollectiveKind, std::string_view what, int, auto start, auto end, int64_t) {
    EXPECT_LE(start, end);
    std::lock_guard lock(mu);
    if (what.starts_with("all_gather")) ++result.events_gather;
    if (what == "reduce_scatter") ++result.events_reduce;
  });
  fsdp.init_parameters([&](int u, std::span<float* const> p) { toy.init(u, p); });
  std::unique_ptr<ShardedOptimizer> opt;
  if (cfg.sgd) {
    opt = std::make_unique<SgdMomentum>(fsdp, SgdConfig{0.9, 0.01}, tracker);
  } else {
    opt = std::make_unique<AdamW>(fsdp, AdamWConfig{0.9, 0.95, 1e-8, 0.01}, tracker);
  }
  const int n = world.size();
  const int64_t local = cfg.global_batch / (n * cfg.accum);
  const int64_t in = toy.widths.front(), out = toy.widths.back();
  for (int s = 0; s < cfg.steps; ++s) {
    double loss = 0;
    for (int m = 0; m < cfg.accum; ++m) {
      fsdp.set_requires_gradient_sync(m == cfg.accum - 1);
      std::vector<std::vector<float>> acts(static_cast<size_t>(toy.units() + 1));
      std::vector<float> target(static_cast<size_t>(local * out));
      acts[0].resize(static_cast<size_t>(local * in));
      for (int64_t i = 0; i < local; ++i) {
        const int64_t id = s * cfg.global_batch + m * (cfg.global_batch / cfg.accum) + world.rank() * local + i;
        toy.sample(id, &acts[0][i * in], &target[i * out]);
      }
      for (int u = 0; u < toy.units(); ++u) {
        auto w = fsdp.pre_forward(u);
        toy.forward(u, w, acts[u], acts[u + 1], local);
        fsdp.post_forward(u);
      }
      std::vector<float> dy(target.size()), dx;
      double micro_loss = 0;
      for (size_t i = 0; i < target.size(); ++i) {
        const double d = acts.back()[i] - target[i];
        micro_loss += 0.5 * d * d / static_cast<double>(local);
        dy[i] = static_cast<float>(d / static_cast<double>(local * cfg.accum));
      }
      loss += micro_loss / cfg.accum;
      for (int u = toy.units() - 1; u >= 0; --u) {
        auto w = fsdp.pre_backward(u);
        toy.backward(u, w, fsdp.grads(u), acts[u], acts[u + 1], dy, dx, local);
        dy.swap(dx);
        fsdp.post_backward(u);
      }
      fsdp.finalize_backward();
    }
    double global_loss = 0;
    world.all_reduce(&loss, &global_loss, 1, DataType::kFloat64, ReduceOp{ReduceKind::kAvg, 1.0}).wait();
    result.losses.push_back(global_loss);
    result.norms.push_back(fsdp.clip_grad_norm(cfg.max_norm));
    opt->step(fsdp, 0.05);
    fsdp.zero_grad();
  }
  for (auto c : {MemoryCategory::kAllGather, MemoryCategory::kUnshardedParams, MemoryCategory::kUnshardedGrads,
                 MemoryCategory::kReduceScatter, MemoryCategory::kKeptParams}) {
    result.leftover_transient += tracker.current(c);
  }
  result.peak_all_gather = tracker.peak(MemoryCategory::kAllGather);
  result.peak_total = tracker.peak_total();
  result.windowed =
      fsdp.groups().shard_gather->windowed_collectives() + fsdp.groups().shard_reduce->windowed_collectives();
  for (int u = 0; u < fsdp.num_units(); ++u) result.params.push_back(fsdp.gather_full_parameters(u));
  return result;
}

// Runs cfg on n in-process ranks; returns rank 0's result after checking every rank agrees.
RunResult run(int n, RunConfig cfg) {
  InProcJob job(n);
  std::vector<RunResult> results(static_cast<size_t>(n));
  job.run([&](Communicator& c) { results[static_cast<size_t>(c.rank())] = train(c, cfg); });
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(results[static_cast<size_t>(r)].losses, results[0].losses) << "rank " << r;
  }
  return results[0];
}

void expect_close(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rel * std::abs(want) + 1e-7) << what << ": got " << got << ", want " << want;
}

void expect_same_training(const RunResult& got, const RunResult& want, double rel = 1e-5) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    expect_close(got.losses[s], want.losses[s], rel, "loss at step " + std::to_string(s + 1));
    expect_close(got.norms[s], want.norms[s], rel, "grad norm at step " + std::to_string(s + 1));
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t u = 0; u < want.params.size(); ++u) {
    ASSERT_EQ(got.params[u].size(), want.params[u].size());
    for (size_t i = 0; i < want.params[u].size(); ++i) {
      expect_close(got.params[u][i], want.params[u][i], rel, "unit " + std::to_string(u) + " element " + std::to_string(i));
    }
  }
  EXPECT_EQ(got.leftover_transient, 0) << "transient buffers still allocated after the last step";
}

RunConfig fp32_config() {
  RunConfig cfg;
  cfg.fsdp.policy.param_dtype = DataType::kFloat32;
  return cfg;
}

const RunResult& reference() {
  static const RunResult r = run(1, fp32_config());
  return r;
}

TEST(FsdpModel, OneRankLossFalls) {
  const RunResult& r = reference();
  EXPECT_LT(r.losses.back(), r.losses.front());
  EXPECT_GT(r.events_gather, 0);
  EXPECT_GT(r.events_reduce, 0);
}

struct Layout {
  int n;
  const char* reshard;
  int64_t prefetch;
  int64_t replicate;
};

class FsdpEquivalence : public ::testing::TestWithParam<Layout> {};

TEST_P(FsdpEquivalence, MatchesOneRank) {
  const Layout l = GetParam();
  RunConfig cfg = fp32_config();
  cfg.fsdp.mesh = spec::Mesh::for_world(l.n, l.replicate);
  cfg.fsdp.policy.reshard = spec::Reshard::parse(l.reshard);
  cfg.fsdp.policy.prefetch = l.prefetch;
  expect_same_training(run(l.n, cfg), reference());
}

INSTANTIATE_TEST_SUITE_P(Layouts, FsdpEquivalence,
                         ::testing::Values(Layout{2, "true", 1, 1}, Layout{3, "true", 1, 1}, Layout{4, "true", 1, 1},
                                           Layout{2, "false", 1, 1}, Layout{4, "false", 2, 1},
                                           Layout{3, "true", 0, 1}, Layout{4, "2", 1, 1}, Layout{4, "1", 1, 1},
                                           Layout{4, "true", 1, 2}, Layout{4, "false", 1, 2}, Layout{6, "3", 2, 1},
                                           Layout{8, "true", 1, 1}),
                         [](const auto& info) {
                           const Layout& l = info.param;
                           return "n" + std::to_string(l.n) + "_reshard_" + l.reshard + "_prefetch" +
                                  std::to_string(l.prefetch) + "_replicate" + std::to_string(l.replicate);
                         });

TEST(FsdpModel, AccumulationWithoutSyncMatchesOneRank) {
  RunConfig cfg = fp32_config();
  cfg.accum = 2;
  for (int n : {2, 3}) expect_same_training(run(n, cfg), reference());
}

TEST(FsdpModel, SgdMomentumMatchesOneRank) {
  RunConfig cfg = fp32_config();
  cfg.sgd = true;
  expect_same_training(run(3, cfg), run(1, cfg));
}

TEST(FsdpModel, Bf16ParamsAndReduceStayCloseToFp32) {
  RunConfig cfg;
  cfg.fsdp.policy.param_dtype = DataType::kBfloat16;
  cfg.fsdp.policy.reduce_dtype = DataType::kBfloat16;
  const RunResult r = run(2, cfg);
  for (size_t s = 0; s < r.losses.size(); ++s) expect_close(r.losses[s], reference().losses[s], 2e-2, "bf16 loss");
  EXPECT_EQ(r.leftover_transient, 0);
}

// MXFP8 on the wire (parameters, gradients, both) against the bf16-communication run: losses within 2%
// at every step, over plain FSDP, a reshard group (the backward gather of the kept slice) and HSDP.
TEST(FsdpModel, Mxfp8CommunicationStaysCloseToBf16) {
  using spec::CommPrecision;
  for (const Layout l : {Layout{4, "true", 1, 1}, Layout{4, "2", 1, 1}, Layout{4, "true", 1, 2}}) {
    RunConfig bf16;
    bf16.fsdp.mesh = spec::Mesh::for_world(l.n, l.replicate);
    bf16.fsdp.policy.reshard = spec::Reshard::parse(l.reshard);
    const RunResult want = run(l.n, bf16);
    for (const auto& [param, grad] : {std::pair{CommPrecision::kMxfp8, CommPrecision::kDefault},
                                      std::pair{CommPrecision::kDefault, CommPrecision::kMxfp8},
                                      std::pair{CommPrecision::kMxfp8, CommPrecision::kMxfp8}}) {
      RunConfig cfg = bf16;
      cfg.fsdp.policy.param_comm = param;
      cfg.fsdp.policy.grad_comm = grad;
      const RunResult got = run(l.n, cfg);
      const std::string what = std::string("mxfp8 (param ") + std::string(spec::name(param)) + ", grad " +
                               std::string(spec::name(grad)) + ", reshard " + l.reshard + ", replicate " +
                               std::to_string(l.replicate) + ") loss";
      ASSERT_EQ(got.losses.size(), want.losses.size());
      for (size_t s = 0; s < want.losses.size(); ++s) expect_close(got.losses[s], want.losses[s], 2e-2, what);
      EXPECT_LT(got.losses.back(), got.losses.front()) << what;
      EXPECT_NE(got.losses.back(), want.losses.back()) << what << ": the wire precision took no effect";
      EXPECT_EQ(got.leftover_transient, 0) << what;
    }
  }
}

TEST(FsdpModel, ReshardAlwaysGathersTheLastUnitAgainInBackward) {
  // TorchTitan's "default" keeps the last unit gathered from its forward into its backward; "always"
  // frees it too and gathers it again: exactly one more all-gather per step, the same training.
  RunConfig cfg = fp32_config();
  const RunResult by_default = run(2, cfg);
  cfg.fsdp.policy.reshard = spec::Reshard::parse("always");
  const RunResult always = run(2, cfg);
  EXPECT_EQ(always.events_gather - by_default.events_gather, cfg.steps);
  expect_same_training(always, reference());
}

TEST(FsdpModel, AllGatherBuffersBoundedByPrefetch) {
  // At most the computing unit plus `prefetch` in flight. In fp32 each gathers straight into the full
  // parameters (Communicator::all_gather_into_runs): its own chunk and the parameters, which are the
  // unit's own once it landed.
  int64_t largest = 0;
  for (const auto& u : spec::shard_model(ToyModel{}.spec(), 4))
    largest = std::max(largest, u.chunk_numel() + u.numel());
  for (int64_t prefetch : {0, 1, 2}) {
    RunConfig cfg = fp32_config();
    cfg.fsdp.policy.prefetch = prefetch;
    const RunResult r = run(4, cfg);
    EXPECT_GT(r.peak_all_gather, 0);
    EXPECT_LE(r.peak_all_gather, (1 + prefetch) * largest * 4) << "prefetch " << prefetch;
  }
}

// On one host the units' all-gather outputs and reduce-scatter inputs are shared-memory windows, so
// those collectives run by loads and stores; FSDP_UNIT_WINDOWS=0 takes plain buffers. At 2 ranks the
// training is bitwise the same either way (a sum of two is the same in any order), bf16 included; at
// 3 and 4 (the windowed reduction adds in rank order, the ring in its own) within 1e-5, with a reshard
// group whose backward all-gathers run over another communicator (plain buffers there).
TEST(FsdpModel, UnitBuffersAreWindowsOnOneHost) {
  struct Case {
    Layout l;
    DataType type;
  };
  for (const Case c : {Case{Layout{2, "true", 1, 1}, DataType::kFloat32}, Case{Layout{2, "false", 2, 1}, DataType::kBfloat16},
                       Case{Layout{3, "false", 2, 1}, DataType::kFloat32}, Case{Layout{4, "2", 1, 1}, DataType::kFloat32}}) {
    RunConfig cfg;
    cfg.fsdp.policy.param_dtype = cfg.fsdp.policy.reduce_dtype = c.type;
    cfg.fsdp.policy.reshard = spec::Reshard::parse(c.l.reshard);
    cfg.fsdp.policy.prefetch = c.l.prefetch;
    const std::string what = "n " + std::to_string(c.l.n) + ", reshard " + c.l.reshard + ", " + std::string(name(c.type));
    const RunResult windowed = run(c.l.n, cfg);
    RunResult plain;
    {
      testing::ScopedEnv off("FSDP_UNIT_WINDOWS", "0");
      plain = run(c.l.n, cfg);
    }
    // Two collectives per unit and step at least: its all-gather and its reduce-scatter.
    EXPECT_GE(windowed.windowed, static_cast<uint64_t>(2 * ToyModel{}.units() * cfg.steps)) << what;
    EXPECT_EQ(plain.windowed, 0u) << what;
    if (c.l.n == 2) {
      EXPECT_EQ(windowed.losses, plain.losses) << what;
      EXPECT_EQ(windowed.norms, plain.norms) << what;
      EXPECT_EQ(windowed.params, plain.params) << what;
    } else {
      expect_same_training(windowed, plain);
    }
    // In float32 without a reshard group the windowed all-gather lands straight in the parameters (no
    // rank-major buffer: FsdpUnit::start_unshard), so its memory differs by design; elsewhere a window
    // replaces a block of the same bytes.
    const bool into_params = c.type == DataType::kFloat32 && c.l.reshard != "2";
    if (!into_params) {
      EXPECT_EQ(windowed.peak_total, plain.peak_total)
          << what << ": the tracker counts a window as the block it replaces";
    }
    EXPECT_EQ(windowed.leftover_transient, 0) << what;
  }
}

// FsdpUnit::add_grad (the PyTorch front end's way in: each gradient straight into the reduce-scatter's
// layout) reduces to the same gradient shards as grads()'s param-major buffer, with two micro-batches
// accumulated without a reduce, a parameter that only the second one reaches and one neither does;
// while they wait the gradients count as unsharded gradients.
TEST(FsdpUnit, AddGradReducesAsGradsDoes) {
  for (DataType reduce : {DataType::kFloat32, DataType::kBfloat16}) {
    InProcJob job(3);  // 3 ranks: every parameter's shards carry padding
    job.run([&](Communicator& c) {
      ProcessGroups groups = ProcessGroups::create(c, spec::Mesh::for_world(3, 1));
      spec::UnitSpec unit{"u", false, {{"a", {5, 3}}, {"b", {7}}, {"c", {2, 2}}, {"d", {4}}}};
      spec::Policy policy;
      policy.param_dtype = DataType::kFloat32;
      policy.reduce_dtype = reduce;
      MemoryTracker tracker_a, tracker_b;
      FsdpUnit by_views(0, unit, policy, groups, tracker_a), by_add(1, unit, policy, groups, tracker_b);
      // Small integers and quarters: exact in bf16, in their sums and in the average over 3 ranks' f32 sums.
      auto grad = [&](size_t p, int micro) {
        std::vector<float> g(static_cast<size_t>(unit.params[p].numel()));
        for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i + p + c.rank() * 3 + micro) % 9) - 4.f;
        return g;
      };
      const std::vector<std::vector<size_t>> reached{{0, 2}, {2, 1, 0}};  // "d" never
      for (int micro = 0; micro < 2; ++micro) {
        for (size_t p : reached[static_cast<size_t>(micro)]) {
          const auto g = grad(p, micro);
          float* into = by_views.grads()[p];
          for (size_t i = 0; i < g.size(); ++i) into[i] += g[i];
          by_add.add_grad(p, g.data(), DataType::kFloat32);
        }
      }
      EXPECT_TRUE(by_add.has_unsharded_grads());
      EXPECT_GT(tracker_b.current(MemoryCategory::kUnshardedGrads), 0);
      for (FsdpUnit* u : {&by_views, &by_add}) {
        u->zero_grad_shard();
        u->start_reduce_grads();
        u->finish_reduce_grads();
      }
      EXPECT_FALSE(by_add.has_unsharded_grads());
      EXPECT_EQ(tracker_b.current(MemoryCategory::kUnshardedGrads), 0);
      const auto want = by_views.grad_shard(), got = by_add.grad_shard();
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << name(reduce) << " element " << i;
      // A dropped gradient (set to None): discard_grad_shard, and the next reduce writes the shard, whatever
      // it held (NaN here), as zero_grad_shard and an add do.
      std::fill(got.begin(), got.end(), std::numeric_limits<float>::quiet_NaN());
      by_add.discard_grad_shard();
      by_views.zero_grad_shard();
      for (size_t p : reached[0]) {
        const auto g = grad(p, 5);
        float* into = by_views.grads()[p];
        for (size_t i = 0; i < g.size(); ++i) into[i] += g[i];
        by_add.add_grad(p, g.data(), DataType::kFloat32);
      }
      for (FsdpUnit* u : {&by_views, &by_add}) {
        u->start_reduce_grads();
        u->finish_reduce_grads();
      }
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << name(reduce) << " discarded, element " << i;
      // A backward that raised (drop_unreduced_grads): a reduce-scatter in flight lands nowhere, gradients
      // added since are dropped; the shard keeps what it held and the next backward starts afresh.
      const std::vector<float> before(got.begin(), got.end());
      by_add.add_grad(0, grad(0, 7).data(), DataType::kFloat32);
      by_add.start_reduce_grads();
      by_add.drop_unreduced_grads();
      by_add.add_grad(1, grad(1, 7).data(), DataType::kFloat32);
      by_add.drop_unreduced_grads();
      EXPECT_FALSE(by_add.has_unsharded_grads());
      EXPECT_EQ(tracker_b.current(MemoryCategory::kUnshardedGrads) + tracker_b.current(MemoryCategory::kReduceScatter), 0);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], before[i]) << name(reduce) << " dropped, element " << i;
    });
  }
}

TEST(FsdpModel, RejectsDegreesThatDoNotTileTheWorld) {
  InProcJob job(4);
  job.run([](Communicator& c) {
    ToyModel toy;
    MemoryTracker tracker;
    FsdpOptions o;
    o.mesh = spec::Mesh::for_world(6, 3);  // 3 replicas x 2 need 6 ranks, not 4
    EXPECT_THROW(FsdpModel(toy.spec(), o, c, tracker), InvalidArgument);
    o.mesh.reset();
    o.policy.reshard = spec::Reshard::parse("3");
    EXPECT_ANY_THROW(FsdpModel(toy.spec(), o, c, tracker));
  });
}

}  // namespace
}  // namespace fsdp::runtime
