// The whole model chained as the runtime drives it (embedding -> 2 blocks -> head) on parameters shaped
// by spec::make_llama, against finite differences; and spec::ModelDims from model specs.
#include "model/llama.h"

#include <gtest/gtest.h>

#include "spec/model_spec.h"
#include "tests/model/test_util.h"

namespace fsdp::model::testing {
namespace {

spec::ModelSpec tiny_spec() {
  return spec::make_llama("tiny", spec::ModelDims{.dim = 16,
                                                  .layers = 2,
                                                  .n_heads = 2,
                                                  .n_kv_heads = 1,
                                                  .vocab = 11,
                                                  .ffn_hidden = spec::llama_ffn_hidden(16, 16, 0)});
}

TEST(LlamaDimsTest, FromSpec) {
  const spec::ModelDims d = spec::model_preset("llama3-8b").dims;
  EXPECT_EQ(d.dim, 4096);
  EXPECT_EQ(d.layers, 32);
  EXPECT_EQ(d.n_heads, 32);
  EXPECT_EQ(d.n_kv_heads, 8);
  EXPECT_EQ(d.ffn_hidden, 14336);
  EXPECT_EQ(d.vocab, 128256);
  EXPECT_EQ(d.head_dim(), 128);
  EXPECT_EQ(d.kv_dim(), 1024);
  EXPECT_EQ(spec::model_preset("llama3-debug").dims.n_kv_heads, 16);
}

TEST(LlamaDimsTest, RejectsBadDims) {
  spec::ModelSpec unknown;
  unknown.name = "no-dims";
  EXPECT_THROW(spec::validate_transformer(unknown.dims), std::invalid_argument);
  spec::ModelDims d = tiny_dims(1);
  d.n_kv_heads = 3;  // 2 heads cannot be grouped into 3
  EXPECT_THROW(spec::validate_transformer(d), std::invalid_argument);
  d = tiny_dims(1);
  d.n_heads = 16;  // head_dim 1: odd, RoPE needs pairs
  d.n_kv_heads = 16;
  EXPECT_THROW(spec::validate_transformer(d), std::invalid_argument);
}

// The kernels' shape assumptions agree with the spec's parameter shapes, in order.
TEST(LlamaDimsTest, SpecShapesMatchTheModulesLayout) {
  for (const char* preset : {"llama3-debug", "llama3-8b"}) {
    const auto spec = spec::model_preset(preset);
    const spec::ModelDims d = spec.dims;
    ASSERT_EQ(spec.units.front().params.size(), kEmbeddingParams);
    EXPECT_EQ(spec.units.front().params[0].shape, (std::vector<int64_t>{d.vocab, d.dim}));
    const auto& layer = spec.units[1].params;
    ASSERT_EQ(layer.size(), kBlockParams);
    const auto sizes = block_param_sizes(d);
    for (size_t i = 0; i < kBlockParams; ++i) EXPECT_EQ(layer[i].numel(), sizes[i]) << layer[i].name;
    EXPECT_EQ(layer[0].shape, (std::vector<int64_t>{d.q_dim(), d.dim}));
    EXPECT_EQ(layer[5].shape, (std::vector<int64_t>{d.dim, d.ffn_hidden}));
    const auto& out = spec.units.back().params;
    ASSERT_EQ(out.size(), kOutputParams);
    EXPECT_EQ(out[1].shape, (std::vector<int64_t>{d.vocab, d.dim}));
  }
}

// One micro-batch through every unit of the tiny spec, driven the way the runtime drives it.
struct Chain {
  spec::ModelSpec spec = tiny_spec();
  spec::ModelDims dims = spec.dims;
  MemoryTracker tracker;
  std::mt19937 rng{40};
  std::vector<ParamSet> units;
  std::vector<int32_t> tokens, targets;
  Embedding emb{dims, tracker};
  std::vector<TransformerBlock> blocks;
  OutputHead head{dims, kBatch, kSeq, tracker};
  std::vector<float> act = std::vector<float>(static_cast<size_t>(kBatch * kSeq * dims.dim));

  Chain() {
    for (const auto& u : spec.units) {
      std::vector<int64_t> sizes;
      std::vector<bool> is_vector;
      for (const auto& p : u.params) {
        sizes.push_back(p.numel());
        is_vector.push_back(p.shape.size() == 1);
      }
      units.emplace_back(sizes, is_vector, rng);
    }
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(dims.vocab) - 1);
    for (int64_t i = 0; i < kBatch * kSeq; ++i) {
      tokens.push_back(pick(rng));
      targets.push_back(pick(rng));
    }
    for (int64_t l = 0; l < dims.layers; ++l) blocks.emplace_back(dims, kBatch, kSeq, tracker);
  }
  float forward() {
    emb.forward(units[0].weights(), tokens.data(), kBatch * kSeq, act.data());
    for (size_t l = 0; l < blocks.size(); ++l) blocks[l].forward(units[l + 1].weights(), act.data(), act.data());
    return head.forward(units.back().weights(), act.data(), targets.data());
  }
  void backward() {
    head.backward(units.back().weights(), units.back().grad_views(), 1.f, act.data());
    for (size_t l = blocks.size(); l-- > 0;) {
      blocks[l].backward(units[l + 1].weights(), units[l + 1].grad_views(), act.data(), act.data());
    }
    emb.backward(units[0].grad_views(), tokens.data(), kBatch * kSeq, act.data());
  }
  static double reference_loss(const Chain& c, const std::vector<std::vector<Vec>>& w) {
    const int64_t D = c.dims.dim;
    Vec x(static_cast<size_t>(kBatch * kSeq * D));
    for (size_t i = 0; i < c.tokens.size(); ++i)
      for (int64_t j = 0; j < D; ++j)
        x[i * static_cast<size_t>(D) + static_cast<size_t>(j)] = w[0][0][static_cast<size_t>(c.tokens[i] * D + j)];
    for (int64_t l = 0; l < c.dims.layers; ++l) x = ref_block(c.dims, kBatch, kSeq, w[static_cast<size_t>(l + 1)], x);
    return ref_head_loss(c.dims, kBatch * kSeq, w.back(), x, c.targets);
  }
};

TEST(LlamaChainTest, WholeModelGradientsMatchFiniteDifferences) {
  Chain c;
  std::vector<std::vector<Vec>> w;
  for (const auto& u : c.units) w.push_back(u.as_double());
  const float loss = c.forward();
  EXPECT_NEAR(loss, Chain::reference_loss(c, w), 1e-5);
  c.backward();
  EXPECT_EQ(c.tracker.current_total(), 0);

  auto loss_fn = [&] { return Chain::reference_loss(c, w); };
  for (size_t u = 0; u < c.units.size(); ++u) {
    for (size_t p = 0; p < w[u].size(); ++p) {
      // The embedding table is checked in full: only the rows of the batch's tokens have gradients.
      const size_t samples = u == 0 ? w[u][p].size() : 12;
      expect_gradient_matches(c.spec.units[u].params[p].name, w[u][p], c.units[u].grads[p].data(), loss_fn, c.rng,
                              samples);
    }
  }
}

// The same check on the fp32 model itself (no reference): central differences of the model's own loss
// with eps 1e-2 on O(0.3) parameters. Looser (fp32 loss rounding / 2 eps ~ 1e-5 of noise; observed
// relative error under 1e-3), but it ties backward to this forward directly.
TEST(LlamaChainTest, WholeModelGradientsMatchFloatFiniteDifferences) {
  Chain c;
  c.forward();
  c.backward();
  const float eps = 1e-2f;
  for (size_t u = 0; u < c.units.size(); ++u) {
    for (size_t p = 0; p < c.units[u].values.size(); ++p) {
      auto& v = c.units[u].values[p];
      std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
      double err2 = 0, ref2 = 0;
      for (int s = 0; s < 6; ++s) {
        const size_t i = u == 0 ? static_cast<size_t>(c.tokens[static_cast<size_t>(s)] * c.dims.dim + s) : pick(c.rng);
        const float saved = v[i];
        v[i] = saved + eps;
        const double lp = c.forward();
        v[i] = saved - eps;
        const double lm = c.forward();
        v[i] = saved;
        const double fd = (lp - lm) / (2 * eps);
        const double a = c.units[u].grads[p][i];
        err2 += (a - fd) * (a - fd);
        ref2 += fd * fd;
      }
      EXPECT_LE(std::sqrt(err2), 1e-2 * std::sqrt(ref2) + 1e-5) << c.spec.units[u].params[p].name;
    }
  }
  for (auto& b : c.blocks) b.release_saved();
  c.head.release_saved();
  EXPECT_EQ(c.tracker.current_total(), 0);
}

}  // namespace
}  // namespace fsdp::model::testing
