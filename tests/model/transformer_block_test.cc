// TransformerBlock: forward against the naive reference, every gradient against finite differences,
// causality, accumulation, aliasing, and saved-activation accounting against the planner's formula.
#include "model/transformer_block.h"

#include <gtest/gtest.h>

#include <cstring>

#include "sharding/cost_model.h"
#include "tests/model/test_util.h"

namespace fsdp::model::testing {
namespace {


const char* const kParamNames[] = {"wq", "wk", "wv", "wo", "w1", "w2", "w3", "attention_norm", "ffn_norm"};

class BlockTest : public ::testing::TestWithParam<int64_t> {  // parameter: n_kv_heads
 protected:
  spec::ModelDims dims_ = tiny_dims(GetParam());
  int64_t n_ = kBatch * kSeq;
  std::mt19937 rng_{static_cast<unsigned>(10 + GetParam())};
  ParamSet p_ = block_params(dims_, rng_);
  std::vector<float> x_ = random_floats(static_cast<size_t>(n_ * dims_.dim), rng_);
  MemoryTracker tracker_;
};

TEST_P(BlockTest, ForwardMatchesReference) {
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  std::vector<float> y(x_.size());
  block.forward(p_.weights(), x_.data(), y.data());
  expect_near_all("block out", y, ref_block(dims_, kBatch, kSeq, p_.as_double(), to_double(x_)), 1e-4, 1e-4);
}

// Llama 3.1 RoPE scaling with an original context of 64, so the 4 pairs of head_dim 8 at theta 10000
// fall in all three bands (wavelengths 6.3: kept; 63: interpolated; 628 and 6283: slowed 8 times).
TEST_P(BlockTest, ForwardWithLlama31RopeScalingMatchesReference) {
  dims_.rope_scaling =
      spec::RopeScaling{.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_context = 64};
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  std::vector<float> y(x_.size());
  block.forward(p_.weights(), x_.data(), y.data());
  expect_near_all("block out", y, ref_block(dims_, kBatch, kSeq, p_.as_double(), to_double(x_)), 1e-4, 1e-4);
  // And it is not plain RoPE.
  spec::ModelDims plain = dims_;
  plain.rope_scaling.reset();
  const Vec unscaled = ref_block(plain, kBatch, kSeq, p_.as_double(), to_double(x_));
  double differ = 0;
  for (size_t i = 0; i < y.size(); ++i) differ = std::max(differ, std::abs(y[i] - unscaled[i]));
  EXPECT_GT(differ, 1e-3);
}

TEST_P(BlockTest, BackwardMatchesFiniteDifferences) {
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  std::vector<float> y(x_.size()), dx(x_.size(), 7.f);
  const auto r = random_floats(x_.size(), rng_);  // loss = sum(y * r), so dy = r
  block.forward(p_.weights(), x_.data(), y.data());
  block.backward(p_.weights(), p_.grad_views(), r.data(), dx.data());

  std::vector<Vec> w = p_.as_double();
  Vec x = to_double(x_);
  const Vec rd = to_double(r);
  auto loss = [&] {
    const Vec out = ref_block(dims_, kBatch, kSeq, w, x);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * rd[i];
    return l;
  };
  for (size_t i = 0; i < kBlockParams; ++i) expect_gradient_matches(kParamNames[i], w[i], p_.grads[i].data(), loss, rng_);
  expect_gradient_matches("x", x, dx.data(), loss, rng_, 40);
}

TEST_P(BlockTest, LaterTokensDoNotChangeEarlierOutputs) {
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  std::vector<float> y0(x_.size()), y1(x_.size());
  block.forward(p_.weights(), x_.data(), y0.data());
  for (int64_t t = 0; t < kSeq; ++t) {
    // Change every row after position t in sequence 0, and all of sequence 1.
    std::vector<float> x = x_;
    for (int64_t row = t + 1; row < n_; ++row) {
      for (int64_t j = 0; j < dims_.dim; ++j) x[static_cast<size_t>(row * dims_.dim + j)] += 1.5f;
    }
    block.forward(p_.weights(), x.data(), y1.data());
    for (int64_t row = 0; row <= t; ++row) {
      for (int64_t j = 0; j < dims_.dim; ++j) {
        const size_t i = static_cast<size_t>(row * dims_.dim + j);
        ASSERT_NEAR(y1[i], y0[i], 1e-6) << "position " << row << " changed when positions > " << t << " did";
      }
    }
    // Sanity: the change is visible where it is allowed to be.
    EXPECT_GT(std::abs(y1[static_cast<size_t>((t + 1) * dims_.dim)] - y0[static_cast<size_t>((t + 1) * dims_.dim)]),
              1e-3);
  }
  block.release_saved();
}

TEST_P(BlockTest, BackwardAddsIntoGradients) {
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  std::vector<float> y(x_.size()), dx(x_.size());
  const auto r = random_floats(x_.size(), rng_);
  block.forward(p_.weights(), x_.data(), y.data());
  block.backward(p_.weights(), p_.grad_views(), r.data(), dx.data());
  const auto once = p_.grads;
  const auto dx_once = dx;
  block.forward(p_.weights(), x_.data(), y.data());
  block.backward(p_.weights(), p_.grad_views(), r.data(), dx.data());
  for (size_t i = 0; i < kBlockParams; ++i) expect_accumulated_twice(p_.grads[i], once[i], kParamNames[i]);
  EXPECT_EQ(dx, dx_once) << "dx must be written, not accumulated";
}

TEST_P(BlockTest, InPlaceBuffersGiveTheSameResults) {
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  const auto r = random_floats(x_.size(), rng_);
  std::vector<float> y(x_.size()), dx(x_.size());
  block.forward(p_.weights(), x_.data(), y.data());
  block.backward(p_.weights(), p_.grad_views(), r.data(), dx.data());

  ParamSet p2 = p_;
  for (auto& g : p2.grads) std::fill(g.begin(), g.end(), 0.f);
  for (size_t i = 0; i < kBlockParams; ++i) {
    p2.w[i] = p2.values[i].data();
    p2.g[i] = p2.grads[i].data();
  }
  std::vector<float> buf = x_;
  block.forward(p2.weights(), buf.data(), buf.data());  // y aliases x
  EXPECT_EQ(buf, y);
  buf = r;
  block.backward(p2.weights(), p2.grad_views(), buf.data(), buf.data());  // dx aliases dy
  EXPECT_EQ(buf, dx);
  EXPECT_EQ(p2.grads, p_.grads);
}

TEST_P(BlockTest, SavedBytesMatchPlannerFormula) {
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  EXPECT_EQ(block.saved_bytes(), 0);
  std::vector<float> y(x_.size()), dx(x_.size());
  block.forward(p_.weights(), x_.data(), y.data());

  const int64_t per_token = sharding::layer_saved_elements_per_token(dims_, spec::ActivationCheckpointing::kNone);
  EXPECT_EQ(per_token, 6 * dims_.dim + 2 * dims_.kv_dim() + 4 * dims_.ffn_hidden);
  const int64_t stats = n_ * (2 + dims_.n_heads);  // two rstd per token, one log-sum-exp per (token, head)
  EXPECT_EQ(block.saved_bytes(), 4 * (n_ * per_token + stats));
  EXPECT_EQ(TransformerBlock::saved_elements(dims_, n_) * 4, block.saved_bytes());
  // Nothing but the saved tensors outlives forward; its scratch was tracked while it lived.
  EXPECT_EQ(tracker_.current(MemoryCategory::kActivations), block.saved_bytes());
  EXPECT_EQ(tracker_.current_total(), block.saved_bytes());
  EXPECT_GT(tracker_.peak(MemoryCategory::kActivations), block.saved_bytes());

  block.backward(p_.weights(), p_.grad_views(), x_.data(), dx.data());
  EXPECT_EQ(block.saved_bytes(), 0);
  EXPECT_EQ(tracker_.current_total(), 0);

  block.forward(p_.weights(), x_.data(), y.data());
  block.release_saved();
  EXPECT_EQ(tracker_.current_total(), 0);
}

TEST_P(BlockTest, RejectsMisuse) {
  TransformerBlock block(dims_, kBatch, kSeq, tracker_);
  std::vector<float> y(x_.size());
  EXPECT_THROW(block.backward(p_.weights(), p_.grad_views(), x_.data(), y.data()), std::logic_error);
  EXPECT_THROW(block.forward(p_.weights().subspan(1), x_.data(), y.data()), std::invalid_argument);
  EXPECT_THROW(TransformerBlock(dims_, 0, kSeq, tracker_), std::invalid_argument);
}

// Llama 3.1 8B's frequencies (head_dim 128, theta 500000, TorchTitan's default scaling): every pair
// against the reference transcription; the fastest pair is untouched, the slowest slowed 8 times.
TEST(RopeScaling, Llama31FrequenciesAreTorchTitans) {
  const spec::RopeScaling s;  // 8, 1, 4, 8192
  int kept = 0, slowed = 0, between = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double plain = ops::rope_frequency(i, 128, 500000, nullptr);
    const double scaled = ops::rope_frequency(i, 128, 500000, &s);
    EXPECT_NEAR(scaled, ref_rope_frequency(i, 128, 500000, s), 1e-15 * plain) << i;
    kept += scaled == plain;
    slowed += std::abs(scaled - plain / 8) <= 1e-15 * plain;
    between += scaled != plain && std::abs(scaled - plain / 8) > 1e-15 * plain;
  }
  EXPECT_EQ(ops::rope_frequency(0, 128, 500000, &s), 1.0);
  // Wavelength 2 pi 500000^(2i/128) below 2048 (i <= 28) kept, above 8192 (i >= 35) slowed.
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(slowed, 29);
  EXPECT_EQ(between, 6);
}

INSTANTIATE_TEST_SUITE_P(KvHeads, BlockTest, ::testing::Values(1, 2),
                         [](const auto& info) { return info.param == 1 ? "gqa" : "mha"; });

}  // namespace
}  // namespace fsdp::model::testing
