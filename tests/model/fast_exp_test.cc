// exp_fast against std::exp: within 2 ulp over the range softmax and SiLU use, clamped outside it,
// NaN kept (a diverging run must still show a NaN loss).
#include "model/fast_exp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace fsdp::model {
namespace {

TEST(FastExp, WithinTwoUlpOfStdExp) {
  double worst = 0;
  for (float x = -87.f; x <= 88.f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    const double got = exp_fast(x);
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    worst = std::max(worst, std::abs(got - want) / ulp);
  }
  std::cout << "largest difference from exp: " << worst << " ulp\n";
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(exp_fast(0.f), 1.f);
}

TEST(FastExp, ClampsOutsideTheRangeAndKeepsNan) {
  EXPECT_GT(exp_fast(-1000.f), 0.f);
  EXPECT_LT(exp_fast(-1000.f), 2e-38f);
  EXPECT_TRUE(std::isfinite(exp_fast(1000.f)));
  EXPECT_GT(exp_fast(1000.f), 1e38f);
  EXPECT_TRUE(std::isnan(exp_fast(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace fsdp::model
