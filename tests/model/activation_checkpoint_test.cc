// Activation checkpointing in TransformerBlock: for every mode (none, selective = the op-level policy,
// full), dense and MoE, the output, the aux loss, dx and every parameter gradient are bitwise those of
// mode none (the recomputation runs the same functions on the same inputs); what forward keeps and the
// backward peak are exactly the planner's unit_memory for that mode.
#include <gtest/gtest.h>

#include <string>

#include "model/transformer_block.h"
#include "sharding/cost_model.h"
#include "spec/shard_layout.h"
#include "spec/spec_error.h"
#include "tests/model/moe_reference.h"
#include "tests/model/test_util.h"

namespace fsdp::model::testing {
namespace {

using spec::ActivationCheckpointing;

struct AcCase {
  ActivationCheckpointing ac;
  bool moe;
};

spec::ModelDims case_dims(bool moe) {
  spec::ModelDims d = tiny_dims(1);
  if (moe) d.moe = moe_dims(spec::RouterScore::kSigmoid, true, 1.5f, 1, 0.f);
  return d;
}

std::vector<int64_t> param_sizes(const spec::ModelDims& d) {
  std::vector<int64_t> s = block_param_sizes(d);
  if (!d.moe.enabled()) return s;
  std::vector<int64_t> out(s.begin(), s.begin() + 4);  // attention; the MoE takes w1 w2 w3's place
  for (int64_t v : moe_param_sizes(d.moe, d.dim)) out.push_back(v);
  out.insert(out.end(), {d.dim, d.dim});
  return out;
}

std::vector<bool> vector_params(const spec::ModelDims& d) {
  std::vector<bool> v(block_param_count(d), false);
  v[v.size() - 1] = v[v.size() - 2] = true;
  return v;
}

// One forward and backward of a fresh block in mode `ac`; everything the caller compares.
struct Pass {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
  double aux = 0;
  int64_t kept_bytes = 0, live_after_forward = 0, backward_peak = 0, live_after_backward = 0;
};

Pass run(const spec::ModelDims& d, ActivationCheckpointing ac, ParamSet p, const std::vector<float>& x,
         const std::vector<float>& dy) {
  for (size_t i = 0; i < p.values.size(); ++i) {  // the copy's views still point at the original
    p.w[i] = p.values[i].data();
    p.g[i] = p.grads[i].data();
  }
  MemoryTracker tracker;
  TransformerBlock block(d, kBatch, kSeq, tracker, ac);
  Pass out;
  out.y.resize(x.size());
  out.dx.resize(x.size());
  block.forward(p.weights(), x.data(), out.y.data());
  out.aux = block.aux_loss();
  out.kept_bytes = block.saved_bytes();
  out.live_after_forward = tracker.current_total();
  tracker.reset_peaks();
  block.backward(p.weights(), p.grad_views(), dy.data(), out.dx.data(), 2.f);
  out.backward_peak = tracker.peak_total();
  out.live_after_backward = tracker.current_total();
  out.grads = p.grads;
  return out;
}

class ActivationCheckpointTest : public ::testing::TestWithParam<AcCase> {};

TEST_P(ActivationCheckpointTest, GradientsAreBitwiseModeNonesAndMemoryIsThePlanners) {
  const AcCase c = GetParam();
  const spec::ModelDims d = case_dims(c.moe);
  std::mt19937 rng{123};
  const ParamSet p{param_sizes(d), vector_params(d), rng};
  const int64_t rows = kBatch * kSeq;
  const auto x = random_floats(static_cast<size_t>(rows * d.dim), rng);
  const auto dy = random_floats(x.size(), rng);

  const Pass none = run(d, ActivationCheckpointing::kNone, p, x, dy);
  const Pass ac = run(d, c.ac, p, x, dy);
  EXPECT_EQ(ac.y, none.y);
  EXPECT_EQ(ac.aux, none.aux);
  EXPECT_EQ(ac.dx, none.dx);
  ASSERT_EQ(ac.grads.size(), none.grads.size());
  for (size_t i = 0; i < ac.grads.size(); ++i) EXPECT_EQ(ac.grads[i], none.grads[i]) << "parameter " << i;

  // The planner's view of this block alone, in fp32 as the reference computes.
  spec::ModelSpec spec{"block", d, {spec::UnitSpec{"layers.0", true, {}}}};
  spec::Policy policy;
  policy.ac = c.ac;
  policy.micro_batch = kBatch;
  policy.seq_len = kSeq;
  const auto m = sharding::unit_memory(spec, spec::shard_model(spec, 1), policy, true)[0];
  policy.ac = ActivationCheckpointing::kNone;
  const auto m_none = sharding::unit_memory(spec, spec::shard_model(spec, 1), policy, true)[0];
  EXPECT_EQ(ac.kept_bytes, m.activations);
  EXPECT_EQ(ac.live_after_forward, m.activations);
  EXPECT_EQ(m.forward_scratch, 4 * TransformerBlock::recomputed_elements(d, rows, c.ac) +
                                   (c.ac == ActivationCheckpointing::kFull && c.moe
                                        ? 4 * (MoeFeedForward::saved_elements(d.moe, 1, d.dim, rows) +
                                               MoeFeedForward::saved_index_elements(d.moe, rows))
                                        : 0));
  if (!c.moe) {
    EXPECT_EQ(ac.backward_peak, m.activations + m.backward_scratch);
  } else {
    // The planner holds a MoE block's backward peak a little high already in mode none (it keeps the
    // MoE's saves for the whole backward, the MoE frees them as it goes): checkpointing moves the
    // measured and the planned peak by the same bytes.
    EXPECT_EQ(ac.backward_peak - none.backward_peak,
              m.activations + m.backward_scratch - (m_none.activations + m_none.backward_scratch));
    EXPECT_LE(ac.backward_peak, m.activations + m.backward_scratch);
  }
  EXPECT_EQ(ac.live_after_backward, 0);
  if (c.ac != ActivationCheckpointing::kNone) EXPECT_LT(ac.kept_bytes, none.kept_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ActivationCheckpointTest,
    ::testing::Values(AcCase{ActivationCheckpointing::kNone, false}, AcCase{ActivationCheckpointing::kSelective, false},
                      AcCase{ActivationCheckpointing::kFull, false}, AcCase{ActivationCheckpointing::kNone, true},
                      AcCase{ActivationCheckpointing::kSelective, true}, AcCase{ActivationCheckpointing::kFull, true}),
    [](const auto& info) { return std::string(spec::name(info.param.ac)) + (info.param.moe ? "_moe" : "_dense"); });

// TorchTitan's layer-interval rule (_apply_layer_sac counts blocks from 1): with k = 2 of 6 blocks,
// blocks 1, 3, 5 are full; k = 1 makes every block full; op-level selective and full apply to all.
TEST(BlockAc, LayerIntervalFollowsTorchTitan) {
  spec::Policy p;
  p.ac = ActivationCheckpointing::kSelective;
  p.ac_every = 2;
  std::string got;
  for (int64_t l = 0; l < 6; ++l) got += spec::block_ac(p, l) == ActivationCheckpointing::kFull ? 'F' : '-';
  EXPECT_EQ(got, "-F-F-F");
  p.ac_every = 3;
  EXPECT_EQ(spec::block_ac(p, 2), ActivationCheckpointing::kFull);
  EXPECT_EQ(spec::block_ac(p, 3), ActivationCheckpointing::kNone);
  p.ac_every = 1;
  EXPECT_EQ(spec::block_ac(p, 0), ActivationCheckpointing::kFull);
  p.ac_every = 0;
  EXPECT_EQ(spec::block_ac(p, 4), ActivationCheckpointing::kSelective);
  EXPECT_EQ(spec::ac_to_string(p), "selective:op");
  p.ac_every = 2;
  EXPECT_EQ(spec::ac_to_string(p), "selective:2");
  spec::Policy q;
  spec::parse_ac("selective:2", q);
  EXPECT_EQ(q.ac, ActivationCheckpointing::kSelective);
  EXPECT_EQ(q.ac_every, 2);
  spec::parse_ac("selective", q);
  EXPECT_EQ(q.ac_every, 0);
  spec::parse_ac("full", q);
  EXPECT_EQ(q.ac, ActivationCheckpointing::kFull);
  EXPECT_THROW(spec::parse_ac("selective:0", q), spec::SpecError);
  EXPECT_THROW(spec::parse_ac("selective:x", q), spec::SpecError);
}

}  // namespace
}  // namespace fsdp::model::testing
