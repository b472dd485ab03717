// init_parameters: a pure function of (seed, name, index) — same in any process, any shard split.
#include "model/init.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "spec/model_spec.h"

namespace fsdp::model {
namespace {

std::vector<std::vector<float>> init_unit(const spec::UnitSpec& unit, uint64_t seed) {
  std::vector<std::vector<float>> values;
  std::vector<float*> ptrs;
  for (const auto& p : unit.params) values.emplace_back(static_cast<size_t>(p.numel()));
  for (auto& v : values) ptrs.push_back(v.data());
  init_parameters(unit, ptrs, seed);
  return values;
}

// A small layer (dim 64, hidden 192) so each case stays fast under sanitizers.
const spec::UnitSpec& debug_layer() {
  static const auto spec = spec::make_llama("small", spec::ModelDims{.dim = 64,
                                                                     .layers = 1,
                                                                     .n_heads = 4,
                                                                     .n_kv_heads = 2,
                                                                     .vocab = 32,
                                                                     .ffn_hidden = spec::llama_ffn_hidden(64, 32, 0)});
  return spec.units[1];
}

TEST(InitTest, DeterministicAndSeeded) {
  const auto a = init_unit(debug_layer(), 7);
  EXPECT_EQ(a, init_unit(debug_layer(), 7));
  EXPECT_NE(a, init_unit(debug_layer(), 8));
  EXPECT_NE(a[1], a[2]) << "wk and wv have the same shape but must not share values";
}

TEST(InitTest, SameValuesInAnotherProcess) {
  const auto want = init_unit(debug_layer(), 11);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    const auto got = init_unit(debug_layer(), 11);
    const ssize_t n = write(fds[1], got[0].data(), got[0].size() * sizeof(float));
    _exit(n == static_cast<ssize_t>(got[0].size() * sizeof(float)) ? 0 : 1);
  }
  close(fds[1]);
  std::vector<float> got(want[0].size());
  size_t off = 0;
  const size_t total = got.size() * sizeof(float);
  while (off < total) {
    const ssize_t n = read(fds[0], reinterpret_cast<char*>(got.data()) + off, total - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(off, total);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(got, want[0]);
}

TEST(InitTest, AnyShardSplitGivesTheSameValues) {
  const auto whole = init_unit(debug_layer(), 3);
  const auto& p = debug_layer().params[4];  // w1 (hidden, dim)
  const int64_t numel = p.numel();
  for (int64_t shards : {3, 7}) {
    std::vector<float> joined;
    for (int64_t s = 0; s < shards; ++s) {
      const int64_t first = numel * s / shards, last = numel * (s + 1) / shards;
      std::vector<float> part(static_cast<size_t>(last - first));
      init_parameter_range(p, 3, first, last - first, part.data());
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, whole[4]) << shards << " shards";
  }
  float one;
  EXPECT_THROW(init_parameter_range(p, 3, numel, 1, &one), std::out_of_range);
}

TEST(InitTest, NormsAreOneAndMatricesAreNormal) {
  const auto v = init_unit(debug_layer(), 5);
  for (size_t i = 0; i < v.size(); ++i) {
    const auto& spec = debug_layer().params[i];
    if (spec.shape.size() == 1) {
      for (float x : v[i]) ASSERT_EQ(x, 1.f) << spec.name;
      continue;
    }
    double sum = 0, sq = 0;
    for (float x : v[i]) {
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v[i].size()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(n)) << spec.name;
    EXPECT_NEAR(sd, 0.02, 0.02 * 0.05) << spec.name;
  }
}

// TorchTitan's scheme (llama3 Transformer.init_weights, depth_init): the sample standard deviation of
// each matrix against the one TorchTitan gives it, and the output's 3-sd cut; a shard initialises the
// same values as the whole.
TEST(InitTest, TorchTitanSchemeScalesOutputProjectionsByDepth) {
  const auto spec = spec::make_llama("deep", spec::ModelDims{.dim = 64,
                                                             .layers = 4,
                                                             .n_heads = 4,
                                                             .n_kv_heads = 2,
                                                             .vocab = 512,
                                                             .ffn_hidden = spec::llama_ffn_hidden(64, 32, 0)});
  const auto sd_of = [](const std::vector<float>& v) {
    double sum = 0, sq = 0;
    for (float x : v) {
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v.size()), mean = sum / n;
    return std::sqrt(sq / n - mean * mean);
  };
  int checked = 0;
  for (const auto& unit : spec.units) {
    for (const auto& p : unit.params) {
      std::vector<float> v(static_cast<size_t>(p.numel()));
      init_parameter_range(p, 9, 0, p.numel(), v.data(), InitScheme::kTorchTitan);
      if (p.shape.size() == 1) {
        for (float x : v) ASSERT_EQ(x, 1.f) << p.name;
        continue;
      }
      double want = 0.02;
      for (int layer = 0; layer < 4; ++layer) {
        const std::string prefix = "layers." + std::to_string(layer) + ".";
        for (const char* out : {"attention.wo.weight", "feed_forward.w2.weight", "feed_forward.w3.weight"}) {
          if (p.name == prefix + out) want = 0.02 / std::sqrt(2.0 * (layer + 1));
        }
      }
      if (p.name == "tok_embeddings.weight") want = 1.0;
      if (p.name == "output.weight") {
        const double sd = 1.0 / 8;  // dim^-1/2
        for (float x : v) ASSERT_LE(std::abs(x), 3 * sd) << p.name;
        want = sd * 0.9866;  // a normal cut at 3 sd keeps sqrt(1 - 6 phi(3) / (2 Phi(3) - 1)) of its sd
      }
      EXPECT_NEAR(init_distribution(p, InitScheme::kTorchTitan).stddev, p.name == "output.weight" ? 1.0 / 8 : want,
                  1e-15)
          << p.name;
      EXPECT_NEAR(sd_of(v), want, want * 0.05) << p.name;
      std::vector<float> part(10);
      init_parameter_range(p, 9, p.numel() / 2, 10, part.data(), InitScheme::kTorchTitan);
      EXPECT_TRUE(std::equal(part.begin(), part.end(), v.begin() + p.numel() / 2)) << p.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 + 4 * 7);
  EXPECT_EQ(parse_init_scheme("normal"), InitScheme::kNormal);
  EXPECT_THROW(parse_init_scheme("xavier"), std::invalid_argument);
}

}  // namespace
}  // namespace fsdp::model
