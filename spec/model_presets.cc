// Built-in models with their published dimensions. Parameter names follow TorchTitan's Llama 3.
#include <cmath>
#include <functional>
#include <map>

#include "spec/model_spec.h"
#include "spec/spec_error.h"

namespace fsdp::spec {
namespace {

ParamSpec param(std::string name, std::vector<int64_t> shape, ParamKind kind = ParamKind::kDense) {
  return ParamSpec{std::move(name), std::move(shape), DataType::kFloat32, kind};
}

struct Preset {
  const char* name;
  LlamaConfig config;
};

// Published configurations (Meta's Llama 2 and Llama 3 / 3.1 model cards and params.json; TorchTitan's debugmodel;
// Mistral's Mixtral-8x7B, Qwen's Qwen3-30B-A3B and deepseek-ai's DeepSeek-V2-Lite config.json).
const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"llama3-debug", LlamaConfig{.dim = 256, .layers = 6, .n_heads = 16, .vocab = 2048}},
      {"debugmodel_byte", debug_model_config()},
      {"debugmodel_byte_moe", debug_moe_model_config()},
      {"llama3-8b", LlamaConfig{.dim = 4096,
                                .layers = 32,
                                .n_heads = 32,
                                .n_kv_heads = 8,
                                .vocab = 128256,
                                .multiple_of = 1024,
                                .ffn_dim_multiplier = 1.3}},
      {"llama3-70b", LlamaConfig{.dim = 8192,
                                 .layers = 80,
                                 .n_heads = 64,
                                 .n_kv_heads = 8,
                                 .vocab = 128256,
                                 .multiple_of = 4096,
                                 .ffn_dim_multiplier = 1.3}},
      {"llama3-405b", LlamaConfig{.dim = 16384,
                                  .layers = 126,
                                  .n_heads = 128,
                                  .n_kv_heads = 8,
                                  .vocab = 128256,
                                  .multiple_of = 4096,
                                  .ffn_dim_multiplier = 1.2}},
      // Llama 2 (Meta's params.json: multiple_of 256, 70B with GQA 8 and ffn_dim_multiplier 1.3, vocab
      // 32000): the models of the public FSDP runs on A100s (docs/planner.md, Public runs).
      {"llama2-7b", LlamaConfig{.dim = 4096, .layers = 32, .n_heads = 32, .vocab = 32000}},
      {"llama2-13b", LlamaConfig{.dim = 5120, .layers = 40, .n_heads = 40, .vocab = 32000}},
      {"llama2-70b", LlamaConfig{.dim = 8192,
                                 .layers = 80,
                                 .n_heads = 64,
                                 .n_kv_heads = 8,
                                 .vocab = 32000,
                                 .multiple_of = 4096,
                                 .ffn_dim_multiplier = 1.3}},
      // Mixtral's expert width 14336 is what TorchTitan's formula gives for dim 4096 with these knobs.
      {"mixtral-8x7b", LlamaConfig{.dim = 4096,
                                   .layers = 32,
                                   .n_heads = 32,
                                   .n_kv_heads = 8,
                                   .vocab = 32000,
                                   .multiple_of = 1024,
                                   .ffn_dim_multiplier = 1.3,
                                   .num_experts = 8,
                                   .experts_per_token = 2,
                                   // softmax over the 8, top 2 renormalised (HF's MixtralSparseMoeBlock)
                                   .routing = {.route_norm = true, .aux_loss_coeff = 0.001}}},
      // Qwen3-30B-A3B's MoE (Qwen's config.json: 48 layers, hidden 2048, 32 heads, 4 kv heads, 128 experts
      // of 768, top 8, norm_topk_prob, no shared expert, untied head, vocab 151936). Its attention is
      // modelled as Llama's: head_dim = dim / n_heads = 64 where Qwen3 has 128, and no QK-norm, so the
      // attention holds half its published weights (30.1 B parameters of the published 30.5 B).
      {"qwen3-30b-a3b", LlamaConfig{.dim = 2048,
                                    .layers = 48,
                                    .n_heads = 32,
                                    .n_kv_heads = 4,
                                    .vocab = 151936,
                                    .multiple_of = 2048,  // ffn_hidden 6144, Qwen3's (unused) dense width
                                    .num_experts = 128,
                                    .experts_per_token = 8,
                                    .expert_hidden = 768,
                                    .routing = {.route_norm = true, .aux_loss_coeff = 0.001}}},
      // DeepSeek-V2-Lite's MoE (deepseek-ai's config.json: 27 layers, hidden 2048, 16 heads, vocab 102400,
      // 64 routed experts of 1408, top 6, 2 shared experts, softmax scores, norm_topk_prob false,
      // routed_scaling_factor 1.0, aux_loss_alpha 0.001, untied head). Modelled as Llama blocks: its MLA
      // attention (kv_lora_rank 512, 192-dim q/k heads) is plain multi-head attention of 16 x 128 here
      // (16.8 M weights a block where MLA has 13.8 M), and its first block, dense (10944 wide) there, is a
      // MoE block like the others: 16.3 B parameters of the published 15.7 B.
      {"deepseek-v2-lite", LlamaConfig{.dim = 2048,
                                       .layers = 27,
                                       .n_heads = 16,
                                       .n_kv_heads = 16,
                                       .vocab = 102400,
                                       .multiple_of = 64,
                                       .ffn_dim_multiplier = 2.0,  // ffn_hidden 10944, the dense width (unused)
                                       .num_experts = 64,
                                       .experts_per_token = 6,
                                       .expert_hidden = 1408,
                                       .shared_experts = 2,
                                       .routing = {.route_norm = false, .aux_loss_coeff = 0.001}}},
  };
  return kPresets;
}

}  // namespace

int64_t llama_ffn_hidden(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier) {
  if (dim <= 0 || multiple_of <= 0) throw SpecError("llama_ffn_hidden: dim and multiple_of must be positive");
  // Python's int() truncates toward zero; the values are positive so static_cast does the same.
  int64_t hidden = static_cast<int64_t>(2.0 * static_cast<double>(4 * dim) / 3.0);
  if (ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(ffn_dim_multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

LlamaConfig debug_model_config() {
  // ~0.85 M parameters: 4 blocks of dim 128 (FFN 384), GQA 8 query / 4 key-value heads of 16 dims, and
  // a 256-token byte vocabulary. A 4 x 128-token micro-batch is ~2.9 GFLOP of matmuls (forward +
  // backward): ~85 ms on one loaded CPU core with single-threaded OpenBLAS sgemm (~35 GFLOP/s).
  return LlamaConfig{.dim = 128, .layers = 4, .n_heads = 8, .n_kv_heads = 4, .vocab = 256, .multiple_of = 64};
}

LlamaConfig debug_moe_model_config() {
  LlamaConfig c = debug_model_config();
  c.num_experts = 8;
  c.experts_per_token = 2;
  c.expert_hidden = 128;
  c.shared_experts = 1;
  c.routing = MoeRouting{.sigmoid = false, .route_norm = true, .route_scale = 1.0, .aux_loss_coeff = 0.01};
  return c;
}

ModelSpec make_llama(std::string name, const LlamaConfig& c) {
  if (c.dim <= 0 || c.layers <= 0 || c.n_heads <= 0 || c.vocab <= 0 || c.n_kv_heads < 0) {
    throw SpecError("llama config '" + name + "': dim, layers, n_heads and vocab must be positive");
  }
  const int64_t kv_heads = c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads;
  const int64_t head_dim = c.dim / c.n_heads;
  const int64_t hidden = llama_ffn_hidden(c.dim, c.multiple_of, c.ffn_dim_multiplier);
  ModelSpec m;
  m.name = std::move(name);
  m.dims = ModelDims{c.layers, c.dim, c.n_heads, kv_heads, hidden, c.vocab, c.num_experts, c.experts_per_token};
  if (c.num_experts > 0) {
    m.dims.expert_hidden = c.expert_hidden;
    m.dims.shared_experts = c.shared_experts;
    m.dims.routing = c.routing;
  }
  const int64_t expert_hidden = m.dims.expert_width();

  m.units.push_back(
      UnitSpec{"tok_embeddings", false, {param("tok_embeddings.weight", {c.vocab, c.dim}, ParamKind::kEmbedding)}});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    UnitSpec u{"layers." + std::to_string(i), true, {}};
    u.params.push_back(param(p + "attention.wq.weight", {c.n_heads * head_dim, c.dim}));
    u.params.push_back(param(p + "attention.wk.weight", {kv_heads * head_dim, c.dim}));
    u.params.push_back(param(p + "attention.wv.weight", {kv_heads * head_dim, c.dim}));
    u.params.push_back(param(p + "attention.wo.weight", {c.dim, c.n_heads * head_dim}));
    if (c.num_experts > 0) {
      u.params.push_back(param(p + "moe.router.gate.weight", {c.num_experts, c.dim}));
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const std::string ep = p + "moe.experts." + std::to_string(e) + ".";
        u.params.push_back(param(ep + "w1.weight", {expert_hidden, c.dim}, ParamKind::kExpert));
        u.params.push_back(param(ep + "w2.weight", {c.dim, expert_hidden}, ParamKind::kExpert));
        u.params.push_back(param(ep + "w3.weight", {expert_hidden, c.dim}, ParamKind::kExpert));
      }
      if (c.shared_experts > 0) {  // dense: every token uses it
        const int64_t sh = c.shared_experts * expert_hidden;
        u.params.push_back(param(p + "moe.shared_experts.w1.weight", {sh, c.dim}));
        u.params.push_back(param(p + "moe.shared_experts.w2.weight", {c.dim, sh}));
        u.params.push_back(param(p + "moe.shared_experts.w3.weight", {sh, c.dim}));
      }
    } else {
      u.params.push_back(param(p + "feed_forward.w1.weight", {hidden, c.dim}));
      u.params.push_back(param(p + "feed_forward.w2.weight", {c.dim, hidden}));
      u.params.push_back(param(p + "feed_forward.w3.weight", {hidden, c.dim}));
    }
    u.params.push_back(param(p + "attention_norm.weight", {c.dim}));
    u.params.push_back(param(p + "ffn_norm.weight", {c.dim}));
    m.units.push_back(std::move(u));
  }
  m.units.push_back(
      UnitSpec{"output", false, {param("norm.weight", {c.dim}), param("output.weight", {c.vocab, c.dim})}});
  validate(m);
  return m;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

ModelSpec model_preset(std::string_view name) {
  for (const auto& p : presets()) {
    if (name == p.name) return make_llama(p.name, p.config);
  }
  std::string known;
  for (const auto& p : presets()) known += std::string(known.empty() ? "" : ", ") + p.name;
  throw SpecError("unknown model '" + std::string(name) + "' (known presets: " + known +
                  "; or pass a path to a .toml model spec)");
}

}  // namespace fsdp::spec
