// Embedding: row lookup forward, scatter-add backward (repeated tokens accumulate), token checks.
#include "model/embedding.h"

#include <gtest/gtest.h>

#include "tests/model/test_util.h"

namespace fsdp::model::testing {
namespace {

TEST(EmbeddingTest, ForwardCopiesTheTokensRows) {
  const spec::ModelDims d = tiny_dims(1);
  std::mt19937 rng(20);
  const auto table = random_floats(static_cast<size_t>(d.vocab * d.dim), rng);
  const std::vector<const float*> w = {table.data()};
  const std::vector<int32_t> tokens = {3, 0, 10, 3};
  MemoryTracker tracker;
  Embedding emb(d, tracker);
  std::vector<float> out(tokens.size() * static_cast<size_t>(d.dim));
  emb.forward(w, tokens.data(), static_cast<int64_t>(tokens.size()), out.data());
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int64_t j = 0; j < d.dim; ++j) {
      ASSERT_EQ(out[i * static_cast<size_t>(d.dim) + static_cast<size_t>(j)], table[static_cast<size_t>(tokens[i] * d.dim + j)]);
    }
  }
  EXPECT_EQ(tracker.peak_total(), 0);
}

TEST(EmbeddingTest, BackwardMatchesFiniteDifferences) {
  const spec::ModelDims d = tiny_dims(1);
  std::mt19937 rng(21);
  auto table = random_floats(static_cast<size_t>(d.vocab * d.dim), rng);
  std::vector<float> grad(table.size(), 0.f);
  const std::vector<const float*> w = {table.data()};
  const std::vector<float*> g = {grad.data()};
  const std::vector<int32_t> tokens = {1, 4, 4, 9, 0, 4, 2, 10, 1, 5};  // 4 and 1 repeat; 3, 6, 7, 8 unused
  const int64_t n = static_cast<int64_t>(tokens.size());
  const auto r = random_floats(static_cast<size_t>(n * d.dim), rng);  // loss = sum(out * r)
  MemoryTracker tracker;
  Embedding emb(d, tracker);
  std::vector<float> out(r.size());
  emb.forward(w, tokens.data(), n, out.data());
  emb.backward(g, tokens.data(), n, r.data());

  Vec td = to_double(table);
  auto loss = [&] {
    double l = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d.dim; ++j) l += td[static_cast<size_t>(tokens[i] * d.dim + j)] * r[static_cast<size_t>(i * d.dim + j)];
    return l;
  };
  expect_gradient_matches("tok_embeddings", td, grad.data(), loss, rng, td.size());
  // Accumulates: a second backward doubles it.
  const auto once = grad;
  emb.backward(g, tokens.data(), n, r.data());
  expect_accumulated_twice(grad, once, "tok_embeddings");
}

TEST(EmbeddingTest, RejectsTokensOutsideTheVocabulary) {
  const spec::ModelDims d = tiny_dims(1);
  std::vector<float> table(static_cast<size_t>(d.vocab * d.dim)), out(static_cast<size_t>(d.dim));
  const std::vector<const float*> w = {table.data()};
  MemoryTracker tracker;
  Embedding emb(d, tracker);
  const int32_t bad[] = {static_cast<int32_t>(d.vocab)};
  const int32_t negative[] = {-1};
  EXPECT_THROW(emb.forward(w, bad, 1, out.data()), std::out_of_range);
  EXPECT_THROW(emb.forward(w, negative, 1, out.data()), std::out_of_range);
}

}  // namespace
}  // namespace fsdp::model::testing
