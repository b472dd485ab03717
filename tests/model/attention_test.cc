// Causal GQA attention against the explicit T x T softmax reference, forward and backward.
#include "model/attention.h"

#include <gtest/gtest.h>

#include "tests/model/test_util.h"

namespace fsdp::model::testing {
namespace {


struct Case {
  AttentionShape shape;
  std::string name;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, ForwardMatchesExplicitSoftmax) {
  const AttentionShape s = GetParam().shape;
  std::mt19937 rng(1);
  const auto q = random_floats(static_cast<size_t>(s.rows() * s.q_dim()), rng);
  const auto k = random_floats(static_cast<size_t>(s.rows() * s.kv_dim()), rng);
  const auto v = random_floats(static_cast<size_t>(s.rows() * s.kv_dim()), rng);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(s.rows() * s.n_heads));
  MemoryTracker tracker;
  causal_attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), tracker);
  const Vec want = ref_attention(to_double(q), to_double(k), to_double(v), s.batch, s.seq, s.n_heads, s.n_kv_heads,
                                 s.head_dim);
  expect_near_all("attention out", out, want, 1e-5, 1e-5);
  EXPECT_EQ(tracker.current_total(), 0);
  EXPECT_EQ(tracker.peak(MemoryCategory::kActivations), static_cast<int64_t>(sizeof(float)) * s.seq * s.seq);
}

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  const AttentionShape s = GetParam().shape;
  std::mt19937 rng(2);
  const auto q = random_floats(static_cast<size_t>(s.rows() * s.q_dim()), rng);
  const auto k = random_floats(static_cast<size_t>(s.rows() * s.kv_dim()), rng);
  const auto v = random_floats(static_cast<size_t>(s.rows() * s.kv_dim()), rng);
  const auto r = random_floats(q.size(), rng);  // loss = sum(out * r), so dout = r
  std::vector<float> out(q.size()), lse(static_cast<size_t>(s.rows() * s.n_heads));
  std::vector<float> dq(q.size(), 7.f), dk(k.size(), 7.f), dv(v.size(), 7.f);  // written, not added
  MemoryTracker tracker;
  causal_attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), tracker);
  causal_attention_backward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), r.data(), dq.data(), dk.data(),
                            dv.data(), tracker);
  EXPECT_EQ(tracker.current_total(), 0);

  Vec qd = to_double(q), kd = to_double(k), vd = to_double(v);
  const Vec rd = to_double(r);
  auto loss = [&] {
    const Vec o = ref_attention(qd, kd, vd, s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim);
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * rd[i];
    return l;
  };
  if (s.seq == 1) {
    // One key per query: the softmax is constant 1, so q and k get zero gradient, up to rounding: ds is
    // dout.v from the float GEMM minus dout.out summed in double, which round apart (by ~1e-8 here, with
    // OpenBLAS's AVX-512 kernel) however exact the probability 1 is.
    for (float g : dq) ASSERT_NEAR(g, 0.f, 1e-6f);
    for (float g : dk) ASSERT_NEAR(g, 0.f, 1e-6f);
  } else {
    expect_gradient_matches("dq", qd, dq.data(), loss, rng, 40);
    expect_gradient_matches("dk", kd, dk.data(), loss, rng, 40);
  }
  expect_gradient_matches("dv", vd, dv.data(), loss, rng, 40);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Case{{2, 5, 2, 1, 8}, "gqa"}, Case{{2, 5, 2, 2, 8}, "mha"},
                                           Case{{1, 7, 4, 2, 4}, "gqa4of2"}, Case{{3, 1, 2, 1, 2}, "seq1"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fsdp::model::testing
