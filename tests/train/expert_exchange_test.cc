// The MoE feed-forward under expert parallelism, its dispatch and combine over all_to_all_v between
// in-process ranks, against each rank's tokens run through the whole MoE on one rank: the outputs,
// d x, the router's and the shared expert's gradients equal the rank's own reference, and each routed
// expert's gradient on its owner equals the sum of the references over the ranks of its EP group.
#include "train/expert_exchange.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/memory_tracker.h"
#include "common/splitmix.h"
#include "model/moe_dispatch.h"
#include "model/moe_feed_forward.h"
#include "tests/collectives/test_support.h"

namespace fsdp::train {
namespace {

constexpr int64_t kDim = 8, kRows = 12;

spec::MoeSpec moe_dims() {
  spec::MoeSpec m;
  m.num_experts = 4;
  m.top_k = 2;
  m.expert_hidden = 6;
  m.num_shared_experts = 1;
  m.route_norm = true;
  m.aux_loss_coeff = 0.01f;
  return m;
}

// Values unique to (salt, index) in [-0.5, 0.5).
std::vector<float> values(uint64_t salt, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] =
        static_cast<float>(splitmix64(salt * 1000003 + static_cast<uint64_t>(i)) % 10000) / 10000.f - 0.5f;
  }
  return v;
}

// Parameter sizes of the MoE with all E experts, in spec order (router, experts' w1 w2 w3, shared).
std::vector<int64_t> param_sizes(const spec::MoeSpec& m) {
  std::vector<int64_t> s{m.num_experts * kDim};
  for (int64_t e = 0; e < m.num_experts; ++e) {
    for (int j = 0; j < 3; ++j) s.push_back(m.expert_hidden * kDim);
  }
  for (int j = 0; j < 3; ++j) s.push_back(m.shared_hidden() * kDim);
  return s;
}

struct RankRun {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;  // every parameter of the full MoE (zero where not held)
  double aux = 0;
};

// One forward and backward of rank `rank`'s tokens through a MoE holding the experts
// [first, first + local) of `weights` (all of them without an exchange).
RankRun run(const spec::MoeSpec& m, int64_t ep, const std::vector<std::vector<float>>& weights, int rank,
            model::ExpertExchange* exchange) {
  MemoryTracker tracker;
  model::MoeFeedForward ffn(m, ep, kDim, kRows, tracker, exchange);
  const int64_t local = model::local_experts(m, ep), first = exchange ? exchange->rank() * local : 0;
  RankRun out;
  out.grads.assign(weights.size(), {});
  for (size_t i = 0; i < weights.size(); ++i) out.grads[i].assign(weights[i].size(), 0.f);
  std::vector<const float*> w;
  std::vector<float*> g;
  auto hold = [&](size_t i) {
    w.push_back(weights[i].data());
    g.push_back(out.grads[i].data());
  };
  hold(0);
  for (int64_t e = first; e < first + local; ++e) {
    for (size_t j = 0; j < 3; ++j) hold(1 + static_cast<size_t>(e) * 3 + j);
  }
  for (size_t j = 0; j < 3; ++j) hold(weights.size() - 3 + j);
  const std::vector<float> x = values(100 + static_cast<uint64_t>(rank), kRows * kDim);
  const std::vector<float> dy = values(200 + static_cast<uint64_t>(rank), kRows * kDim);
  out.y.assign(x.size(), 0.f);
  out.dx.assign(x.size(), 0.f);
  out.aux = ffn.forward(w, x.data(), out.y.data(), 0.f);
  ffn.backward(w, g, x.data(), dy.data(), out.dx.data(), 0.f, 3.f);
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << what << " element " << i;
  }
}

struct Case {
  int world;
  int ep;
};

class ExpertParallelMoe : public ::testing::TestWithParam<Case> {};

TEST_P(ExpertParallelMoe, MatchesEachRankOnItsOwn) {
  const Case c = GetParam();
  const spec::MoeSpec full = moe_dims();
  std::vector<std::vector<float>> weights;
  uint64_t salt = 1;
  for (int64_t n : param_sizes(full)) weights.push_back(values(salt++, n));
  std::vector<RankRun> want;
  for (int r = 0; r < c.world; ++r) want.push_back(run(full, 1, weights, r, nullptr));

  std::vector<RankRun> got(static_cast<size_t>(c.world));
  testing::InProcJob job(c.world);
  job.run([&](Communicator& world) {
    // EP groups: runs of ep consecutive ranks, as within a shard group.
    auto group = world.split(world.rank() / c.ep, world.rank() % c.ep);
    CommExpertExchange exchange(*group);
    got[static_cast<size_t>(world.rank())] = run(full, c.ep, weights, world.rank(), &exchange);
  });

  const size_t shared = weights.size() - 3;
  for (int r = 0; r < c.world; ++r) {
    const RankRun& g = got[static_cast<size_t>(r)];
    const RankRun& w = want[static_cast<size_t>(r)];
    const std::string at = "rank " + std::to_string(r);
    expect_close(g.y, w.y, at + " y");
    expect_close(g.dx, w.dx, at + " dx");
    EXPECT_NEAR(g.aux, w.aux, 1e-12) << at;
    expect_close(g.grads[0], w.grads[0], at + " router");
    for (size_t j = shared; j < weights.size(); ++j) expect_close(g.grads[j], w.grads[j], at + " shared expert");
    // Routed experts: the owner's gradient sums its EP group's tokens.
    const int64_t local = model::local_experts(full, c.ep), first = (r % c.ep) * local;
    const int group_start = r / c.ep * c.ep;
    for (int64_t e = first; e < first + local; ++e) {
      for (size_t j = 0; j < 3; ++j) {
        const size_t p = 1 + static_cast<size_t>(e) * 3 + j;
        std::vector<float> sum(weights[p].size(), 0.f);
        for (int s = group_start; s < group_start + c.ep; ++s) {
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += want[static_cast<size_t>(s)].grads[p][i];
        }
        expect_close(g.grads[p], sum, at + " expert " + std::to_string(e));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, ExpertParallelMoe,
                         ::testing::Values(Case{2, 2}, Case{4, 2}, Case{4, 4}),
                         [](const auto& info) {
                           return "n" + std::to_string(info.param.world) + "_ep" + std::to_string(info.param.ep);
                         });

// The regrouping between the source-major arrival and the expert-major order is a permutation and
// expert_to_source_major undoes it; rows per owner sum each owner's experts.
TEST(ExpertParallelDispatch, RegroupRoundTrips) {
  const int64_t group = 3, local = 2, dim = 2;
  // (source, local expert) counts: source-major rows s0l0: 0, s0l1: 1, s1l0: 2 3, s1l1: 4, s2l0: 5;
  // expert-major: l0 takes 0 (s0), 2 3 (s1), 5 (s2), then l1 takes 1 (s0), 4 (s1).
  const std::vector<int64_t> recv_counts{1, 1, 2, 1, 1, 0};
  std::vector<float> src(6 * dim);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  std::vector<float> expert_major(src.size()), back(src.size());
  model::source_to_expert_major(src.data(), recv_counts.data(), group, local, dim, expert_major.data());
  const std::vector<float> want_rows{0, 2, 3, 5, 1, 4};
  for (size_t r = 0; r < want_rows.size(); ++r) EXPECT_EQ(expert_major[r * dim], want_rows[r] * dim) << r;
  model::expert_to_source_major(expert_major.data(), recv_counts.data(), group, local, dim, back.data());
  EXPECT_EQ(back, src);
  const std::vector<int64_t> counts{1, 2, 3, 4, 5, 6};
  std::vector<int64_t> per_owner(3);
  model::rows_per_owner(counts.data(), 6, 3, per_owner.data());
  EXPECT_EQ(per_owner, (std::vector<int64_t>{3, 7, 11}));
}

}  // namespace
}  // namespace fsdp::train
