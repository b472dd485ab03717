// OutputHead: loss against the naive reference (also with huge logits), gradients of
// loss_scale * mean loss against finite differences, accumulation and memory accounting.
#include "model/output_head.h"

#include <gtest/gtest.h>

#include "tests/model/test_util.h"

namespace fsdp::model::testing {
namespace {

class OutputHeadTest : public ::testing::Test {
 protected:
  spec::ModelDims dims_ = tiny_dims(1);
  int64_t n_ = kBatch * kSeq;
  std::mt19937 rng_{30};
  ParamSet p_ = head_params(dims_, rng_);
  std::vector<float> x_ = random_floats(static_cast<size_t>(n_ * dims_.dim), rng_);
  std::vector<int32_t> targets_ = [this] {
    std::vector<int32_t> t(static_cast<size_t>(n_));
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(dims_.vocab) - 1);
    for (auto& v : t) v = pick(rng_);
    return t;
  }();
  MemoryTracker tracker_;
};

TEST_F(OutputHeadTest, LossMatchesReference) {
  OutputHead head(dims_, kBatch, kSeq, tracker_);
  const float loss = head.forward(p_.weights(), x_.data(), targets_.data());
  EXPECT_NEAR(loss, ref_head_loss(dims_, n_, p_.as_double(), to_double(x_), targets_), 1e-5);
  EXPECT_EQ(head.saved_bytes(), 4 * n_ * (2 * dims_.dim + 1 + dims_.vocab) + 4 * n_);
  EXPECT_EQ(tracker_.current_total(), head.saved_bytes());
  head.release_saved();
  EXPECT_EQ(tracker_.current_total(), 0);
}

TEST_F(OutputHeadTest, LossIsStableForHugeLogits) {
  for (auto& v : p_.values[1]) v *= 1000.f;  // logits in the thousands: a naive exp overflows
  OutputHead head(dims_, kBatch, kSeq, tracker_);
  const float loss = head.forward(p_.weights(), x_.data(), targets_.data());
  const double want = ref_head_loss(dims_, n_, p_.as_double(), to_double(x_), targets_);
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_GT(want, 100.0);
  EXPECT_NEAR(loss, want, 1e-4 * want);
  std::vector<float> dx(x_.size());
  head.backward(p_.weights(), p_.grad_views(), 1.f, dx.data());
  for (float v : dx) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(OutputHeadTest, BackwardMatchesFiniteDifferences) {
  const float scale = 2.5f;
  OutputHead head(dims_, kBatch, kSeq, tracker_);
  std::vector<float> dx(x_.size(), 7.f);
  head.forward(p_.weights(), x_.data(), targets_.data());
  head.backward(p_.weights(), p_.grad_views(), scale, dx.data());
  EXPECT_EQ(tracker_.current_total(), 0);

  std::vector<Vec> w = p_.as_double();
  Vec x = to_double(x_);
  auto loss = [&] { return scale * ref_head_loss(dims_, n_, w, x, targets_); };
  expect_gradient_matches("norm.weight", w[0], p_.grads[0].data(), loss, rng_);
  expect_gradient_matches("output.weight", w[1], p_.grads[1].data(), loss, rng_, 40);
  expect_gradient_matches("x", x, dx.data(), loss, rng_, 40);
}

TEST_F(OutputHeadTest, BackwardAddsIntoGradients) {
  OutputHead head(dims_, kBatch, kSeq, tracker_);
  std::vector<float> dx(x_.size());
  head.forward(p_.weights(), x_.data(), targets_.data());
  head.backward(p_.weights(), p_.grad_views(), 1.f, dx.data());
  const auto once = p_.grads;
  head.forward(p_.weights(), x_.data(), targets_.data());
  head.backward(p_.weights(), p_.grad_views(), 1.f, dx.data());
  for (size_t i = 0; i < once.size(); ++i) expect_accumulated_twice(p_.grads[i], once[i], "head parameter " + std::to_string(i));
}

TEST_F(OutputHeadTest, RejectsMisuse) {
  OutputHead head(dims_, kBatch, kSeq, tracker_);
  std::vector<float> dx(x_.size());
  EXPECT_THROW(head.backward(p_.weights(), p_.grad_views(), 1.f, dx.data()), std::logic_error);
  targets_[3] = static_cast<int32_t>(dims_.vocab);
  EXPECT_THROW(head.forward(p_.weights(), x_.data(), targets_.data()), std::out_of_range);
  EXPECT_EQ(tracker_.current_total(), 0);
}

}  // namespace
}  // namespace fsdp::model::testing
