#include "train/dataset.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "spec/mesh.h"

namespace fsdp::train {
namespace {

std::shared_ptr<const TokenSource> source(const std::string& name) {
  return std::shared_ptr<const TokenSource>(make_token_source(name, 256, 7));
}

DataLoaderOptions opts(int64_t b, int64_t t, int64_t accum, int64_t rank, int64_t size, uint64_t seed = 42) {
  return DataLoaderOptions{b, t, accum, rank, size, seed};
}

TEST(TinyCorpus, IsEmbeddedEnglishText) {
  const std::string_view c = tiny_corpus();
  EXPECT_GE(c.size(), 20'000u);
  EXPECT_LE(c.size(), 60'000u);
  EXPECT_NE(c.find("all-gather"), std::string_view::npos);
  for (char ch : c) ASSERT_TRUE(ch == '\n' || (ch >= 0x20 && ch < 0x7f)) << static_cast<int>(ch);
}

TEST(DataLoader, TargetsAreInputsShiftedByOne) {
  for (const std::string name : {"tiny_corpus", "synthetic"}) {
    auto src = source(name);
    const DataLoader loader(src, opts(3, 16, 1, 0, 1));
    Batch b;
    loader.fill(5, 0, b);
    ASSERT_EQ(b.inputs.size(), 3u * 16);
    ASSERT_EQ(b.targets.size(), 3u * 16);
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<Token> window(17);
      src->fill_window(WindowId{42, 5, 0, r}, window);
      for (int64_t t = 0; t < 16; ++t) {
        EXPECT_EQ(b.inputs[static_cast<size_t>(r * 16 + t)], window[static_cast<size_t>(t)]);
        EXPECT_EQ(b.targets[static_cast<size_t>(r * 16 + t)], window[static_cast<size_t>(t + 1)]);
      }
    }
  }
}

TEST(DataLoader, DeterministicAndVaryingOverStepsMicroStepsAndSeeds) {
  auto src = source("tiny_corpus");
  DataLoader a(src, opts(2, 32, 2, 0, 1));
  DataLoader b(src, opts(2, 32, 2, 0, 1));
  std::vector<std::vector<Token>> seen;
  for (int i = 0; i < 6; ++i) {
    const Batch x = a.next();
    const Batch y = b.next();
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.step, 1 + i / 2);
    EXPECT_EQ(x.micro_step, i % 2);
    for (const auto& s : seen) EXPECT_NE(s, x.inputs);
    seen.push_back(x.inputs);
  }
  DataLoader other_seed(src, opts(2, 32, 2, 0, 1, 43));
  EXPECT_NE(other_seed.next().inputs, seen.front());
}

// The union over data-parallel ranks of one step is exactly the 1-rank batch of local x dp rows, rank r
// holding rows r*local .. (r+1)*local-1, for pure FSDP and HSDP (replica x shard) layouts.
TEST(DataLoader, UnionOverRanksEqualsTheGlobalBatch) {
  struct Layout {
    int64_t replicate, shard;
  };
  const std::vector<Layout> layouts = {{1, 1}, {1, 2}, {2, 1}, {1, 3}, {3, 1}, {1, 4}, {2, 2}, {4, 1}};
  const int64_t local = 3, seq = 8, accum = 2;
  for (const std::string name : {"tiny_corpus", "synthetic"}) {
    auto src = source(name);
    for (const auto& l : layouts) {
      const int64_t dp = l.replicate * l.shard;
      DataLoader global(src, opts(local * dp, seq, accum, 0, 1));
      const auto mesh = spec::Mesh::for_world(dp, l.replicate, l.shard);
      std::vector<DataLoader> ranks;
      for (int64_t rank = 0; rank < dp; ++rank) {
        ranks.emplace_back(src, opts(local, seq, accum, mesh.data_parallel_rank(rank), mesh.data_parallel_size()));
      }
      for (int micro = 0; micro < 2 * accum; ++micro) {
        const Batch g = global.next();
        for (int64_t r = 0; r < dp; ++r) {
          const Batch part = ranks[static_cast<size_t>(r)].next();
          ASSERT_EQ(part.step, g.step);
          ASSERT_EQ(part.micro_step, g.micro_step);
          const auto begin = static_cast<std::ptrdiff_t>(r * local * seq);
          const auto end = begin + static_cast<std::ptrdiff_t>(local * seq);
          EXPECT_EQ(std::vector<Token>(g.inputs.begin() + begin, g.inputs.begin() + end), part.inputs)
              << name << " dp " << dp << " (" << l.replicate << "x" << l.shard << ") rank " << r;
          EXPECT_EQ(std::vector<Token>(g.targets.begin() + begin, g.targets.begin() + end), part.targets);
        }
      }
    }
  }
}

TEST(DataLoader, StateRestoreResumesExactly) {
  auto src = source("synthetic");
  DataLoader a(src, opts(2, 16, 3, 1, 2));
  for (int i = 0; i < 4; ++i) a.next();
  const DataLoaderState saved = a.state();
  EXPECT_EQ(saved, (DataLoaderState{2, 1}));
  const Batch expected = a.next();

  DataLoader b(src, opts(2, 16, 3, 1, 2));
  b.restore(saved);
  EXPECT_EQ(b.state(), saved);
  const Batch got = b.next();
  EXPECT_EQ(got.inputs, expected.inputs);
  EXPECT_EQ(got.step, 2);
  EXPECT_EQ(got.micro_step, 1);
  EXPECT_THROW(b.restore(DataLoaderState{1, 3}), std::invalid_argument);
  EXPECT_THROW(b.restore(DataLoaderState{0, 0}), std::invalid_argument);
}

TEST(DataLoader, RejectsBadOptions) {
  auto src = source("tiny_corpus");
  EXPECT_THROW(DataLoader(src, opts(0, 8, 1, 0, 1)), std::invalid_argument);
  EXPECT_THROW(DataLoader(src, opts(1, 8, 1, 2, 2)), std::invalid_argument);
  DataLoader too_long(src, opts(1, 100'000, 1, 0, 1));
  EXPECT_THROW(too_long.next(), std::invalid_argument);
  EXPECT_THROW(make_token_source("tiny_corpus", 128, 0), std::invalid_argument);
  EXPECT_THROW(make_token_source("c4", 256, 0), std::invalid_argument);
}

TEST(SyntheticSource, MostlyFollowsTheSeededPermutation) {
  const SyntheticSource s(256, 7);
  const SyntheticSource same(256, 7);
  const SyntheticSource other(256, 8);
  int differs = 0;
  for (Token t = 0; t < 256; ++t) {
    EXPECT_EQ(s.successor(t), same.successor(t));
    differs += s.successor(t) != other.successor(t);
  }
  EXPECT_GT(differs, 200);
  std::vector<Token> w(4097);
  s.fill_window(WindowId{1, 1, 0, 0}, w);
  int follows = 0;
  for (size_t i = 1; i < w.size(); ++i) {
    ASSERT_GE(w[i], 0);
    ASSERT_LT(w[i], 256);
    follows += w[i] == s.successor(w[i - 1]);
  }
  const double frac = follows / 4096.0;
  EXPECT_GT(frac, 0.84);  // 7/8 + 1/(8*256) expected
  EXPECT_LT(frac, 0.91);
}

}  // namespace
}  // namespace fsdp::train
