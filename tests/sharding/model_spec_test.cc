// Model presets against their published sizes; TOML spec files and their errors.
#include "spec/model_spec.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "sharding/cost_model.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {
namespace {

// Exact count for a Llama 3 style model: embeddings + untied head + final norm + per-layer weights.
int64_t llama_count(int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t hidden, int64_t vocab,
                    int64_t experts = 0) {
  const int64_t kv = kv_heads * (dim / heads);
  const int64_t attention = 2 * dim * dim + 2 * kv * dim;
  const int64_t ffn = experts > 0 ? experts * 3 * dim * hidden + experts * dim : 3 * dim * hidden;
  return 2 * vocab * dim + dim + layers * (attention + ffn + 2 * dim);
}

TEST(ModelSpecTest, FfnHiddenFollowsTorchTitan) {
  EXPECT_EQ(spec::llama_ffn_hidden(256, 256, 0), 768);
  EXPECT_EQ(spec::llama_ffn_hidden(4096, 1024, 1.3), 14336);
  EXPECT_EQ(spec::llama_ffn_hidden(8192, 4096, 1.3), 28672);
  EXPECT_EQ(spec::llama_ffn_hidden(16384, 4096, 1.2), 53248);
}

TEST(ModelSpecTest, PresetParameterCountsMatchPublishedTotals) {
  struct Case {
    const char* name;
    int64_t exact;
    double published;
  };
  const Case cases[] = {
      {"llama3-debug", llama_count(256, 6, 16, 16, 768, 2048), 0},
      {"llama3-8b", llama_count(4096, 32, 32, 8, 14336, 128256), 8.03e9},
      {"llama3-70b", llama_count(8192, 80, 64, 8, 28672, 128256), 70.55e9},
      {"llama3-405b", llama_count(16384, 126, 128, 8, 53248, 128256), 405.85e9},
      {"mixtral-8x7b", llama_count(4096, 32, 32, 8, 14336, 32000, 8), 46.7e9},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const spec::ModelSpec m = spec::model_preset(c.name);
    EXPECT_EQ(m.num_params(), c.exact);
    if (c.published > 0) {
      EXPECT_NEAR(static_cast<double>(m.num_params()), c.published, 0.005 * c.published);
    }
  }
  EXPECT_EQ(spec::model_preset("llama3-8b").num_params(), 8030261248);
  EXPECT_EQ(spec::model_preset("llama3-debug").num_params(), 6163712);
}

TEST(ModelSpecTest, PresetLayoutAndNames) {
  const spec::ModelSpec m = spec::model_preset("llama3-70b");
  ASSERT_EQ(m.units.size(), 82u);  // embeddings, 80 blocks, norm + head
  EXPECT_EQ(m.units.front().params[0].name, "tok_embeddings.weight");
  EXPECT_EQ(m.units[1].params[0].name, "layers.0.attention.wq.weight");
  EXPECT_TRUE(m.units[1].is_layer);
  EXPECT_EQ(m.units.back().params[0].name, "norm.weight");
  EXPECT_EQ(m.units.back().params[1].name, "output.weight");
  EXPECT_EQ(m.units[1].params[1].shape, (std::vector<int64_t>{1024, 8192}));  // wk: 8 kv heads x 128
  const spec::ModelSpec debug = spec::model_preset("llama3-debug");
  EXPECT_EQ(debug.dims.n_kv_heads, 16);
  EXPECT_EQ(debug.dims.ffn_hidden, 768);
}

TEST(ModelSpecTest, MixtureOfExpertsHasExpertsAsParameters) {
  const spec::ModelSpec m = spec::model_preset("mixtral-8x7b");
  const auto& block = m.units[1];
  int experts = 0;
  for (const auto& p : block.params) experts += p.kind == spec::ParamKind::kExpert;
  EXPECT_EQ(experts, 8 * 3);
  EXPECT_EQ(block.params[4].name, "layers.0.moe.router.gate.weight");
  EXPECT_EQ(block.params[5].name, "layers.0.moe.experts.0.w1.weight");
  // About 12.9B active parameters per token (2 of 8 experts).
  EXPECT_NEAR(m.active_matmul_params(), 12.6e9, 0.3e9);
}

TEST(ModelSpecTest, MoePresetsCarryExpertWidthSharedExpertAndRouting) {
  // debugmodel_byte_moe: per block attention 2*128*128 + 2*64*128, router 8*128, 8 experts of 3*128*128,
  // one shared expert 3*128*128, two norms; byte embeddings and head, final norm.
  const spec::ModelSpec debug = spec::model_preset("debugmodel_byte_moe");
  const int64_t block = 2 * 128 * 128 + 2 * 64 * 128 + 8 * 128 + 8 * 3 * 128 * 128 + 3 * 128 * 128 + 2 * 128;
  EXPECT_EQ(debug.num_params(), 4 * block + 2 * 256 * 128 + 128);
  EXPECT_EQ(debug.dims.expert_width(), 128);
  EXPECT_EQ(debug.dims.moe.num_shared_experts, 1);
  EXPECT_TRUE(debug.dims.moe.route_norm);
  const auto& p = debug.units[1].params;
  ASSERT_EQ(p.size(), 4u + 1 + 24 + 3 + 2);
  EXPECT_EQ(p[29].name, "layers.0.moe.shared_experts.w1.weight");
  EXPECT_EQ(p[29].kind, spec::ParamKind::kDense);  // every token uses it
  EXPECT_EQ(p[30].shape, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(p[5].shape, (std::vector<int64_t>{128, 128}));  // experts.0.w1: expert width, not ffn_hidden 384
  // The dense debug model's saves with the same active FFN width (2 experts + 1 shared of 128 = 384),
  // plus the routing: 8 scores, 2 weights and 2 weight gradients, 2 x 2 x 128 grouped rows, 6 indices.
  EXPECT_EQ(
      layer_saved_elements_per_token(debug.dims, spec::ActivationCheckpointing::kNone),
      layer_saved_elements_per_token(spec::model_preset("debugmodel_byte").dims, spec::ActivationCheckpointing::kNone) +
          8 + 4 + 512 + 6);

  // qwen3-30b-a3b: 128 experts of 768, top 8; attention with head_dim 64 (Qwen3's is 128).
  const spec::ModelSpec q = spec::model_preset("qwen3-30b-a3b");
  const int64_t qblock = 2 * 2048 * 2048 + 2 * 256 * 2048 + 128 * 2048 + 128 * 3 * 768 * 2048 + 2 * 2048;
  EXPECT_EQ(q.num_params(), 48 * qblock + 2 * 151936 * 2048 + 2048);
  EXPECT_NEAR(static_cast<double>(q.num_params()), 30.1e9, 0.05e9);
  EXPECT_EQ(q.dims.moe.top_k, 8);
  EXPECT_EQ(q.units[1].params[5].shape, (std::vector<int64_t>{768, 2048}));
  EXPECT_EQ(spec::model_preset("mixtral-8x7b").dims.expert_width(), 14336);
  EXPECT_TRUE(spec::model_preset("mixtral-8x7b").dims.moe.route_norm);
}

TEST(ModelSpecTest, UnknownModelNamesThePresets) {
  try {
    spec::model_preset("llama4-1t");
    FAIL();
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model 'llama4-1t'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("llama3-405b"), std::string::npos);
  }
}

constexpr const char* kTiny = R"(# a two-unit model
[model]
name = "tiny"
layers = 1
dim = 8
n_heads = 2
ffn_hidden = 16
vocab = 32

[[units]]
name = "embed"
params = [ { name = "emb", shape = [32, 8], kind = "embedding" } ]

[[units]]
name = "block"
layer = true
[[units.params]]
name = "w"
shape = [16, 8]
dtype = "bf16"
[[units.params]]
name = "scale"
shape = []
)";

TEST(ModelSpecTest, ParsesTomlSpec) {
  const spec::ModelSpec m = spec::parse_model_spec(kTiny, "tiny.toml");
  EXPECT_EQ(m.name, "tiny");
  ASSERT_EQ(m.units.size(), 2u);
  EXPECT_EQ(m.units[0].params[0].kind, spec::ParamKind::kEmbedding);
  EXPECT_TRUE(m.units[1].is_layer);
  EXPECT_EQ(m.units[1].params[0].dtype, DataType::kBfloat16);
  EXPECT_EQ(m.units[1].params[1].numel(), 1);  // scalar
  EXPECT_EQ(m.num_params(), 32 * 8 + 16 * 8 + 1);
  EXPECT_EQ(m.dims.n_kv_heads, 2);
}

TEST(ModelSpecTest, LoadsSpecFileAndResolvesPaths) {
  const std::string path = ::testing::TempDir() + "sharding_tiny_spec.toml";
  std::ofstream(path) << kTiny;
  EXPECT_EQ(spec::resolve_model(path).name, "tiny");
  EXPECT_EQ(spec::resolve_model("llama3-debug").name, "llama3-debug");
  std::remove(path.c_str());
  EXPECT_THROW(spec::load_model_spec_file("/nonexistent/spec.toml"), spec::SpecError);
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    spec::parse_model_spec(text, "bad.toml");
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ModelSpecTest, SpecErrorsNameTheLine) {
  const std::string head = "[model]\nname = \"m\"\n[[units]]\nname = \"u\"\n";
  // Line 5: negative dimension.
  expect_error(head + "params = [ { name = \"w\", shape = [4, -2] } ]\n", "bad.toml:5: param 'w' has dimension -2");
  // Line 5: zero dimension.
  expect_error(head + "params = [ { name = \"w\", shape = [0] } ]\n", "bad.toml:5:");
  // Line 5: unknown dtype.
  expect_error(head + "params = [ { name = \"w\", shape = [4], dtype = \"float7\" } ]\n", "bad.toml:5:");
  // Line 5: a typo in a key.
  expect_error(head + "params = [ { name = \"w\", shap = [4] } ]\n", "bad.toml:5:");
  // Line 5: syntax error.
  expect_error(head + "params = [ { name = \"w\", shape = [4 } ]\n", "bad.toml:5:");
  // Line 2: shape not an array.
  expect_error("[model]\nname = 3\n", "bad.toml:2:");
  expect_error("[model]\nname = \"m\"\n", "no [[units]]");
  expect_error(head + "params = []\n", "bad.toml:3:");
  expect_error(head + "params = [ { name = \"w\", shape = [4] }, { name = \"w\", shape = [2] } ]\n",
               "duplicate parameter name 'w'");
  expect_error("[model]\nname = \"m\"\nlayers = -1\n", "bad.toml:3:");
}

}  // namespace
}  // namespace fsdp::sharding
