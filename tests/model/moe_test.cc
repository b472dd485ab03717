// The MoE feed-forward (router, dispatch, grouped experts, shared expert): forward against the dense
// per-token reference (moe_reference.h), every gradient against finite differences of that reference
// (including the router through its scores and the auxiliary loss), the load-balancing loss against a
// hand computation, deterministic top-k ties, capacity drops, accumulation and memory accounting.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "model/moe_dispatch.h"
#include "model/moe_feed_forward.h"
#include "model/moe_router.h"
#include "model/transformer_block.h"
#include "sharding/cost_model.h"
#include "tests/model/moe_reference.h"
#include "tests/model/test_util.h"

namespace fsdp::model::testing {
namespace {

constexpr int64_t kDim = 16;
constexpr int64_t kRows = kBatch * kSeq;

struct Case {
  const char* name;
  spec::MoeSpec moe;
};

const Case kCases[] = {
    {"softmax", moe_dims(spec::RouterScore::kSoftmax, false, 1.f, 0, 0.f)},                     // Mixtral-like
    {"softmax_norm_shared", moe_dims(spec::RouterScore::kSoftmax, true, 1.f, 2, 0.f)},          // Qwen3 + shared
    {"sigmoid_norm_scaled_shared", moe_dims(spec::RouterScore::kSigmoid, true, 2.5f, 1, 0.f)},  // DeepSeek-V3-like
    {"sigmoid_capacity", moe_dims(spec::RouterScore::kSigmoid, false, 1.f, 0, 0.75f)},          // drops choices
};

std::string param_name(const spec::MoeSpec& m, size_t i) {
  if (i == 0) return "router.gate";
  const char* w[] = {"w1", "w2", "w3"};
  const size_t e = (i - 1) / 3;
  if (e < static_cast<size_t>(m.num_experts)) return "experts." + std::to_string(e) + "." + w[(i - 1) % 3];
  return std::string("shared_experts.") + w[(i - 1) % 3];
}

// The scalar the gradient checks differentiate: sum(y * r) + aux_scale * aux of a reference result, so
// dy = r and the aux loss enters with aux_scale.
template <class RefOut>
double probe_loss(const RefOut& out, const Vec& r, double aux_scale) {
  double l = aux_scale * out.aux;
  for (size_t i = 0; i < out.y.size(); ++i) l += out.y[i] * r[i];
  return l;
}

class MoeTest : public ::testing::TestWithParam<Case> {
 protected:
  spec::MoeSpec moe_ = GetParam().moe;
  std::mt19937 rng_{77};
  ParamSet p_{moe_param_sizes(moe_, kDim), std::vector<bool>(moe_param_count(moe_, 1), false), rng_};
  std::vector<float> x_ = random_floats(static_cast<size_t>(kRows * kDim), rng_);
  MemoryTracker tracker_;
};

TEST_P(MoeTest, ForwardMatchesDensePerTokenReference) {
  MoeFeedForward ffn(moe_, 1, kDim, kRows, tracker_);
  std::vector<float> y(x_.size(), 3.f);
  const double aux = ffn.forward(p_.weights(), x_.data(), y.data(), 0.f);
  const RefMoe ref = ref_moe(moe_, kRows, kDim, p_.as_double(), to_double(x_));
  expect_near_all("moe out", y, ref.y, 1e-5, 1e-4);
  EXPECT_NEAR(aux, ref.aux, 1e-6 * ref.aux);
  // Counts agree with the reference's kept choices, and every choice is accounted for.
  std::vector<int64_t> want(static_cast<size_t>(moe_.num_experts), 0);
  int64_t dropped = 0;
  for (int64_t t = 0; t < kRows; ++t) {
    for (int64_t j = 0; j < moe_.top_k; ++j) {
      if (ref.kept[t][j]) {
        ++want[ref.chosen[t][j]];
      } else {
        ++dropped;
      }
    }
  }
  EXPECT_EQ(ffn.tokens_per_expert(), want);
  EXPECT_EQ(ffn.dropped(), dropped);
  if (moe_.capacity_factor > 0) {
    EXPECT_GT(dropped, 0) << "the capacity case must drop something to test dropping";
  }
  // beta = 1 adds onto y (the residual path of the block).
  std::vector<float> y2(x_.size(), 0.5f);
  ffn.forward(p_.weights(), x_.data(), y2.data(), 1.f);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y2[i], y[i] + 0.5f, 1e-6f);
  ffn.release_saved();
}

TEST_P(MoeTest, BackwardMatchesFiniteDifferences) {
  MoeFeedForward ffn(moe_, 1, kDim, kRows, tracker_);
  std::vector<float> y(x_.size()), dx(x_.size(), 5.f);
  const auto r = random_floats(x_.size(), rng_);  // loss = sum(y * r) + aux_scale * aux
  const float aux_scale = 3.f;
  ffn.forward(p_.weights(), x_.data(), y.data(), 0.f);
  const std::vector<int64_t> counts = ffn.tokens_per_expert();
  ffn.backward(p_.weights(), p_.grad_views(), x_.data(), r.data(), dx.data(), 0.f, aux_scale);

  std::vector<Vec> w = p_.as_double();
  Vec x = to_double(x_);
  const Vec rd = to_double(r);
  auto loss = [&] { return probe_loss(ref_moe(moe_, kRows, kDim, w, x), rd, aux_scale); };
  for (size_t i = 0; i < moe_param_count(moe_, 1); ++i) {
    const size_t e = (i - 1) / 3;
    if (i > 0 && e < counts.size() && counts[e] == 0) {
      // An expert without tokens has no gradient at all.
      for (float v : p_.grads[i]) ASSERT_EQ(v, 0.f) << param_name(moe_, i);
      continue;
    }
    expect_gradient_matches(param_name(moe_, i), w[i], p_.grads[i].data(), loss, rng_, 40);
  }
  expect_gradient_matches("x", x, dx.data(), loss, rng_, 60);
}

TEST_P(MoeTest, AuxLossGradientAloneReachesRouterAndInput) {
  // dy = 0: every gradient comes from the auxiliary loss, through P (its counts are constant).
  MoeFeedForward ffn(moe_, 1, kDim, kRows, tracker_);
  std::vector<float> y(x_.size()), dx(x_.size()), zero(x_.size(), 0.f);
  ffn.forward(p_.weights(), x_.data(), y.data(), 0.f);
  ffn.backward(p_.weights(), p_.grad_views(), x_.data(), zero.data(), dx.data(), 0.f, 1.f);
  std::vector<Vec> w = p_.as_double();
  Vec x = to_double(x_);
  auto loss = [&] { return ref_moe(moe_, kRows, kDim, w, x).aux; };
  expect_gradient_matches("router.gate (aux only)", w[0], p_.grads[0].data(), loss, rng_, 64);
  expect_gradient_matches("x (aux only)", x, dx.data(), loss, rng_, 40);
  for (size_t i = 1; i < moe_param_count(moe_, 1); ++i) {
    for (float v : p_.grads[i]) ASSERT_EQ(v, 0.f) << param_name(moe_, i) << " has a gradient from the aux loss";
  }
}

TEST_P(MoeTest, BackwardAddsIntoGradientsAndFreesWhatItSaved) {
  MoeFeedForward ffn(moe_, 1, kDim, kRows, tracker_);
  std::vector<float> y(x_.size()), dx(x_.size(), 1.f), dx_added(x_.size(), 1.f);
  const auto r = random_floats(x_.size(), rng_);
  ffn.forward(p_.weights(), x_.data(), y.data(), 0.f);
  const int64_t saved =
      4 * (MoeFeedForward::saved_elements(moe_, 1, kDim, kRows) + MoeFeedForward::saved_index_elements(moe_, kRows));
  EXPECT_EQ(ffn.saved_bytes(), saved);
  EXPECT_EQ(tracker_.current_total(), saved);
  ffn.backward(p_.weights(), p_.grad_views(), x_.data(), r.data(), dx.data(), 0.f, 1.f);
  EXPECT_EQ(ffn.saved_bytes(), 0);
  EXPECT_EQ(tracker_.current_total(), 0);
  const auto once = p_.grads;
  ffn.forward(p_.weights(), x_.data(), y.data(), 0.f);
  ffn.backward(p_.weights(), p_.grad_views(), x_.data(), r.data(), dx_added.data(), 1.f, 1.f);
  for (size_t i = 0; i < p_.grads.size(); ++i) expect_accumulated_twice(p_.grads[i], once[i], param_name(moe_, i));
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(dx_added[i], dx[i] + 1.f, 1e-5f) << "dx_beta = 1 adds";
  EXPECT_THROW(ffn.backward(p_.weights(), p_.grad_views(), x_.data(), r.data(), dx.data(), 0.f, 1.f), std::logic_error);
  EXPECT_THROW(ffn.forward(p_.weights().subspan(1), x_.data(), y.data(), 0.f), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Routing, MoeTest, ::testing::ValuesIn(kCases), [](const auto& info) { return info.param.name; });

// Router over dim = E with an identity gate, so a token's logits are its x row.
struct IdentityRouter {
  spec::MoeSpec moe;
  std::vector<float> gate;
  explicit IdentityRouter(spec::MoeSpec m) : moe(m), gate(static_cast<size_t>(m.num_experts * m.num_experts), 0.f) {
    for (int64_t e = 0; e < m.num_experts; ++e) gate[static_cast<size_t>(e * m.num_experts + e)] = 1.f;
  }
  double route(const std::vector<float>& x, std::vector<int32_t>& expert, std::vector<float>& weight) {
    const int64_t n = static_cast<int64_t>(x.size()) / moe.num_experts;
    std::vector<float> scores(x.size());
    expert.assign(static_cast<size_t>(n * moe.top_k), -1);
    weight.assign(expert.size(), 0.f);
    return router_forward(moe, x.data(), gate.data(), n, moe.num_experts, scores.data(), expert.data(), weight.data());
  }
};

TEST(MoeRouterTest, LoadBalancingLossMatchesHandComputation) {
  // Four tokens, four experts, top 2, softmax over logits log(p) so the scores are exactly p:
  //   token 0: p = .4 .3 .2 .1   -> experts 0, 1
  //   token 1: p = .1 .2 .3 .4   -> experts 3, 2
  //   token 2: p = .25 each      -> experts 0, 1 (ties: lower index)
  //   token 3: p = .1 .5 .1 .3   -> experts 1, 3
  // tokens per expert c = (2, 3, 1, 2); f = E / (k n) * c = c / 2 = (1, 1.5, .5, 1)
  // P = column means of p = (.85, 1.25, .85, 1.05) / 4 = (.2125, .3125, .2125, .2625)
  // sum f P = .2125 + .46875 + .10625 + .2625 = 1.05; aux = 0.01 * 1.05 = 0.0105.
  spec::MoeSpec m = moe_dims(spec::RouterScore::kSoftmax, false, 1.f, 0, 0.f);
  m.aux_loss_coeff = 0.01f;
  const double p[4][4] = {{.4, .3, .2, .1}, {.1, .2, .3, .4}, {.25, .25, .25, .25}, {.1, .5, .1, .3}};
  std::vector<float> x;
  for (const auto& row : p)
    for (double v : row) x.push_back(static_cast<float>(std::log(v)));
  IdentityRouter router(m);
  std::vector<int32_t> expert;
  std::vector<float> weight;
  const double aux = router.route(x, expert, weight);
  EXPECT_EQ(expert, (std::vector<int32_t>{0, 1, 3, 2, 0, 1, 1, 3}));
  EXPECT_NEAR(aux, 0.0105, 1e-8);
  EXPECT_NEAR(weight[0], .4f, 1e-6f);
  EXPECT_NEAR(weight[1], .3f, 1e-6f);
  // Perfect balance gives exactly the coefficient: f = P = 1 / E... times E: sum f P = 1.
  std::vector<float> uniform(16, 0.f);
  IdentityRouter k1(moe_dims(spec::RouterScore::kSoftmax, false, 1.f, 0, 0.f));
  k1.moe.top_k = 1;
  k1.moe.aux_loss_coeff = 0.01f;
  for (int t = 0; t < 4; ++t) uniform[static_cast<size_t>(t * 4 + t)] = 2.f;  // token t prefers expert t
  EXPECT_NEAR(k1.route(uniform, expert, weight), 0.01, 1e-8);
  // route_norm and route_scale: token 0's weights .4 and .3 become 4/7 and 3/7, times 2.5.
  m.route_norm = true;
  m.route_scale = 2.5f;
  IdentityRouter normed(m);
  normed.route(x, expert, weight);
  EXPECT_NEAR(weight[0], 2.5f * 4.f / 7.f, 1e-6f);
  EXPECT_NEAR(weight[1], 2.5f * 3.f / 7.f, 1e-6f);
}

TEST(MoeRouterTest, TopKTiesGoToTheLowerExpertIndex) {
  for (spec::RouterScore score : {spec::RouterScore::kSoftmax, spec::RouterScore::kSigmoid}) {
    SCOPED_TRACE(score == spec::RouterScore::kSoftmax ? "softmax" : "sigmoid");
    spec::MoeSpec m = moe_dims(score, false, 1.f, 0, 0.f);
    m.top_k = 3;
    IdentityRouter router(m);
    std::vector<int32_t> expert;
    std::vector<float> weight;
    // All equal: experts 0, 1, 2. Two tied maxima (1 and 3) then a tie of 0 and 2: 1, 3, 0.
    // The same scores in the other token order give the same choices per token.
    router.route({0, 0, 0, 0, .5f, 2, .5f, 2, 2, .5f, 2, .5f}, expert, weight);
    EXPECT_EQ(expert, (std::vector<int32_t>{0, 1, 2, 1, 3, 0, 0, 2, 1}));
    router.route({2, .5f, 2, .5f, .5f, 2, .5f, 2, 0, 0, 0, 0}, expert, weight);
    EXPECT_EQ(expert, (std::vector<int32_t>{0, 2, 1, 1, 3, 0, 0, 1, 2}));
  }
}

TEST(MoeDispatchTest, GroupsExpertMajorTokensAscendingAndDropsLateArrivals) {
  // 5 tokens, top 2 of 3 experts.
  const std::vector<int32_t> expert{2, 0, 0, 2, 1, 2, 2, 0, 0, 1};
  std::vector<int64_t> counts(3);
  std::vector<int32_t> row_of(10), token_of(10, -1);
  EXPECT_EQ(group_by_expert(expert.data(), 5, 2, 3, -1, counts.data(), row_of.data(), token_of.data()), 10);
  EXPECT_EQ(counts, (std::vector<int64_t>{4, 2, 4}));
  EXPECT_EQ(token_of, (std::vector<int32_t>{0, 1, 3, 4, 2, 4, 0, 1, 2, 3}));
  EXPECT_EQ(row_of, (std::vector<int32_t>{6, 0, 1, 7, 4, 8, 9, 2, 3, 5}));
  // Capacity 3: expert 0 drops token 4's choice, expert 2 drops token 3's; rows shrink to 8.
  EXPECT_EQ(expert_capacity(0.9f, 5, 2, 3), 3);
  EXPECT_EQ(group_by_expert(expert.data(), 5, 2, 3, 3, counts.data(), row_of.data(), token_of.data()), 8);
  EXPECT_EQ(counts, (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(row_of, (std::vector<int32_t>{5, 0, 1, 6, 3, 7, -1, 2, -1, 4}));
  const std::vector<int32_t> bad{0, 3};
  EXPECT_THROW(group_by_expert(bad.data(), 1, 2, 3, -1, counts.data(), row_of.data(), token_of.data()),
               std::out_of_range);
}

// The MoE feed-forward in place of the dense FFN of a transformer block (GQA, sigmoid scores, route_norm,
// a shared expert): forward, aux loss and every gradient of the unit against the reference.
class MoeBlockTest : public ::testing::Test {
 protected:
  static spec::ModelDims dims() {
    spec::ModelDims d = tiny_dims(1);
    d.moe = moe_dims(spec::RouterScore::kSigmoid, true, 1.5f, 1, 0.f);
    return d;
  }
  static std::vector<int64_t> sizes(const spec::ModelDims& d) {
    std::vector<int64_t> s = block_param_sizes(d);  // wq wk wv wo w1 w2 w3 norms: drop w1 w2 w3
    std::vector<int64_t> out(s.begin(), s.begin() + 4);
    for (int64_t v : moe_param_sizes(d.moe, d.dim)) out.push_back(v);
    out.insert(out.end(), {d.dim, d.dim});
    return out;
  }
  spec::ModelDims dims_ = dims();
  std::mt19937 rng_{91};
  std::vector<bool> is_vector_ = [this] {
    std::vector<bool> v(block_param_count(dims_), false);
    v[v.size() - 1] = v[v.size() - 2] = true;
    return v;
  }();
  ParamSet p_{sizes(dims_), is_vector_, rng_};
  std::vector<float> x_ = random_floats(static_cast<size_t>(kRows * dims_.dim), rng_);
  MemoryTracker tracker_;
};

TEST_F(MoeBlockTest, ForwardAndEveryGradientMatchTheReference) {
  ASSERT_EQ(block_param_count(dims_), 4u + 1 + 12 + 3 + 2);
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  std::vector<float> y(x_.size()), dx(x_.size());
  const auto r = random_floats(x_.size(), rng_);
  const float aux_scale = 2.f;
  block.forward(p_.weights(), x_.data(), y.data());
  const RefMoeBlock ref = ref_moe_block(dims_, kBatch, kSeq, p_.as_double(), to_double(x_));
  expect_near_all("moe block out", y, ref.y, 1e-4, 1e-4);
  EXPECT_NEAR(block.aux_loss(), ref.aux, 1e-6 * ref.aux);
  EXPECT_GT(block.aux_loss(), 0);
  int64_t routed = 0;
  for (int64_t c : block.tokens_per_expert()) routed += c;
  EXPECT_EQ(routed, kRows * dims_.moe.top_k);
  EXPECT_EQ(block.saved_bytes(), 4 * (TransformerBlock::saved_elements(dims_, kRows) +
                                      MoeFeedForward::saved_elements(dims_.moe, 1, dims_.dim, kRows) +
                                      MoeFeedForward::saved_index_elements(dims_.moe, kRows)));
  // The planner's per-token formula is exact for the MoE block too (plus the block's fp32 statistics).
  EXPECT_EQ(block.saved_bytes(),
            4 * (kRows * sharding::layer_saved_elements_per_token(dims_, spec::ActivationCheckpointing::kNone) +
                 kRows * (2 + dims_.n_heads)));
  block.backward(p_.weights(), p_.grad_views(), r.data(), dx.data(), aux_scale);
  EXPECT_EQ(tracker_.current_total(), 0);

  std::vector<Vec> w = p_.as_double();
  Vec x = to_double(x_);
  const Vec rd = to_double(r);
  auto loss = [&] { return probe_loss(ref_moe_block(dims_, kBatch, kSeq, w, x), rd, aux_scale); };
  for (size_t i = 0; i < w.size(); ++i) {
    expect_gradient_matches("block param " + std::to_string(i), w[i], p_.grads[i].data(), loss, rng_);
  }
  expect_gradient_matches("x", x, dx.data(), loss, rng_, 40);
}

TEST(MoeDimsTest, FromSpecGivesTheMoeBlock) {
  const spec::ModelDims d = spec::model_preset("debugmodel_byte_moe").dims;
  EXPECT_EQ(d.moe.num_experts, 8);
  EXPECT_EQ(d.moe.top_k, 2);
  EXPECT_EQ(d.moe.expert_hidden, 128);
  EXPECT_EQ(d.moe.num_shared_experts, 1);
  EXPECT_EQ(d.moe.score, spec::RouterScore::kSoftmax);
  EXPECT_TRUE(d.moe.route_norm);
  EXPECT_FLOAT_EQ(d.moe.aux_loss_coeff, 0.01f);
  EXPECT_EQ(d.moe.capacity_factor, 0.f);  // dropless
  // The block's parameter count and shapes are the spec's, in order.
  const auto spec = spec::model_preset("debugmodel_byte_moe");
  ASSERT_EQ(spec.units[1].params.size(), block_param_count(d));
  EXPECT_EQ(spec::model_preset("mixtral-8x7b").dims.moe.expert_hidden, 14336);
}

TEST(MoeDimsTest, RejectsBadRouting) {
  spec::MoeSpec m = moe_dims(spec::RouterScore::kSoftmax, false, 1.f, 0, 0.f);
  m.top_k = 5;
  EXPECT_THROW(spec::validate(m), std::invalid_argument);
  m.top_k = 0;
  EXPECT_THROW(spec::validate(m), std::invalid_argument);
  m.top_k = 2;
  m.capacity_factor = -1.f;
  EXPECT_THROW(spec::validate(m), std::invalid_argument);
  MemoryTracker tracker;
  m.capacity_factor = 0.f;
  m.expert_hidden = 0;
  EXPECT_THROW(MoeFeedForward(m, 1, 16, 4, tracker), std::invalid_argument);
}

}  // namespace
}  // namespace fsdp::model::testing
