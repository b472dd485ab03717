// Built-in models with their published dimensions. Parameter names follow TorchTitan's Llama 3.
#include <cmath>
#include <functional>
#include <map>

#include "spec/checked_size.h"
#include "spec/model_spec.h"
#include "spec/spec_error.h"

namespace fsdp::spec {
namespace {

ParamSpec param(std::string name, std::vector<int64_t> shape, ParamKind kind = ParamKind::kDense) {
  return ParamSpec{std::move(name), std::move(shape), DataType::kFloat32, kind};
}

struct Preset {
  const char* name;
  ModelDims dims;
};

// Published configurations (Meta's Llama 2 and Llama 3 / 3.1 model cards and params.json; TorchTitan's debugmodel;
// Mistral's Mixtral-8x7B, Qwen's Qwen3-30B-A3B and deepseek-ai's DeepSeek-V2-Lite config.json).
const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"llama3-debug",
       ModelDims{.dim = 256, .layers = 6, .n_heads = 16, .vocab = 2048, .ffn_hidden = llama_ffn_hidden(256, 256, 0)}},
      {"debugmodel_byte", debug_model_dims()},
      {"debugmodel_byte_moe", debug_moe_model_dims()},
      {"llama3-8b", ModelDims{.dim = 4096,
                              .layers = 32,
                              .n_heads = 32,
                              .n_kv_heads = 8,
                              .vocab = 128256,
                              .ffn_hidden = llama_ffn_hidden(4096, 1024, 1.3)}},
      {"llama3-70b", ModelDims{.dim = 8192,
                               .layers = 80,
                               .n_heads = 64,
                               .n_kv_heads = 8,
                               .vocab = 128256,
                               .ffn_hidden = llama_ffn_hidden(8192, 4096, 1.3)}},
      {"llama3-405b", ModelDims{.dim = 16384,
                                .layers = 126,
                                .n_heads = 128,
                                .n_kv_heads = 8,
                                .vocab = 128256,
                                .ffn_hidden = llama_ffn_hidden(16384, 4096, 1.2)}},
      // Llama 2 (Meta's params.json: multiple_of 256, 70B with GQA 8 and ffn_dim_multiplier 1.3, vocab
      // 32000): the models of the public FSDP runs on A100s (docs/planner.md, Public runs).
      {"llama2-7b",
       ModelDims{
           .dim = 4096, .layers = 32, .n_heads = 32, .vocab = 32000, .ffn_hidden = llama_ffn_hidden(4096, 256, 0)}},
      {"llama2-13b",
       ModelDims{
           .dim = 5120, .layers = 40, .n_heads = 40, .vocab = 32000, .ffn_hidden = llama_ffn_hidden(5120, 256, 0)}},
      {"llama2-70b", ModelDims{.dim = 8192,
                               .layers = 80,
                               .n_heads = 64,
                               .n_kv_heads = 8,
                               .vocab = 32000,
                               .ffn_hidden = llama_ffn_hidden(8192, 4096, 1.3)}},
      // Mixtral's expert width 14336 is what TorchTitan's formula gives for dim 4096 with these knobs.
      {"mixtral-8x7b", ModelDims{.dim = 4096,
                                 .layers = 32,
                                 .n_heads = 32,
                                 .n_kv_heads = 8,
                                 .vocab = 32000,
                                 .ffn_hidden = llama_ffn_hidden(4096, 1024, 1.3),
                                 .moe = {.num_experts = 8, .top_k = 2, .route_norm = true, .aux_loss_coeff = 0.001f}}},
      // Qwen3-30B-A3B's MoE (Qwen's config.json: 48 layers, hidden 2048, 32 heads, 4 kv heads, 128 experts
      // of 768, top 8, norm_topk_prob, no shared expert, untied head, vocab 151936). Its attention is
      // modelled as Llama's: head_dim = dim / n_heads = 64 where Qwen3 has 128, and no QK-norm, so the
      // attention holds half its published weights (30.1 B parameters of the published 30.5 B).
      {"qwen3-30b-a3b", ModelDims{.dim = 2048,
                                  .layers = 48,
                                  .n_heads = 32,
                                  .n_kv_heads = 4,
                                  .vocab = 151936,
                                  .ffn_hidden = llama_ffn_hidden(2048, 2048, 0),  // 6144, Qwen3's (unused) dense width
                                  .moe = {.num_experts = 128,
                                          .top_k = 8,
                                          .expert_hidden = 768,
                                          .route_norm = true,
                                          .aux_loss_coeff = 0.001f}}},
      // DeepSeek-V2-Lite's MoE (deepseek-ai's config.json: 27 layers, hidden 2048, 16 heads, vocab 102400,
      // 64 routed experts of 1408, top 6, 2 shared experts, softmax scores, norm_topk_prob false,
      // routed_scaling_factor 1.0, aux_loss_alpha 0.001, untied head). Modelled as Llama blocks: its MLA
      // attention (kv_lora_rank 512, 192-dim q/k heads) is plain multi-head attention of 16 x 128 here
      // (16.8 M weights a block where MLA has 13.8 M), and its first block, dense (10944 wide) there, is a
      // MoE block like the others: 16.3 B parameters of the published 15.7 B.
      {"deepseek-v2-lite", ModelDims{.dim = 2048,
                                     .layers = 27,
                                     .n_heads = 16,
                                     .n_kv_heads = 16,
                                     .vocab = 102400,
                                     .ffn_hidden = llama_ffn_hidden(2048, 64, 2.0),  // 10944, the dense width (unused)
                                     .moe = {.num_experts = 64,
                                             .top_k = 6,
                                             .expert_hidden = 1408,
                                             .num_shared_experts = 2,
                                             .route_norm = false,
                                             .aux_loss_coeff = 0.001f}}},
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

ModelDims debug_model_dims() {
  // ~0.85 M parameters: 4 blocks of dim 128 (FFN 384), GQA 8 query / 4 key-value heads of 16 dims, and
  // a 256-token byte vocabulary. A 4 x 128-token micro-batch is ~2.9 GFLOP of matmuls (forward +
  // backward): ~85 ms on one loaded CPU core with single-threaded OpenBLAS sgemm (~35 GFLOP/s).
  return ModelDims{.dim = 128,
                   .layers = 4,
                   .n_heads = 8,
                   .n_kv_heads = 4,
                   .vocab = 256,
                   .ffn_hidden = llama_ffn_hidden(128, kDebugModelMultipleOf, 0)};
}

ModelDims debug_moe_model_dims() {
  ModelDims d = debug_model_dims();
  d.moe = MoeSpec{.num_experts = 8,
                  .top_k = 2,
                  .expert_hidden = 128,
                  .num_shared_experts = 1,
                  .score = RouterScore::kSoftmax,
                  .route_norm = true,
                  .route_scale = 1.f,
                  .aux_loss_coeff = 0.01f};
  return d;
}

namespace {

// Refuses dims whose weights would hold more than kMaxModelElements elements (one or all together) or
// whose units could not all be built (more than kMaxLayers blocks, kMaxExperts experts), before anything
// is built, naming the field that makes them large (SizeOverflow::driver).
void check_llama_sizes(const std::string& where, const ModelDims& d) {
  if (d.layers > kMaxLayers) {
    throw SizeOverflow(where + "layers = " + std::to_string(d.layers) + " is more than " + std::to_string(kMaxLayers) +
                           " blocks (one FSDP unit each)",
                       "layers", false);
  }
  if (d.moe.num_experts > kMaxExperts) {
    throw SizeOverflow(
        where + "experts = " + std::to_string(d.moe.num_experts) + " is more than " + std::to_string(kMaxExperts),
        "experts", false);
  }
  const auto bounded = [&](int64_t n, const std::string& what, const char* driver) {
    if (n > kMaxModelElements) {
      throw SizeOverflow(
          where + what + " has " + std::to_string(n) + " elements, more than " + std::to_string(kMaxModelElements),
          driver);
    }
    return n;
  };
  // [rows, dim] weights; q_dim and kv_dim are at most dim.
  const auto weight = [&](int64_t rows, const char* what, const char* driver) {
    return bounded(checked_mul(rows, d.dim, where + what + " elements", driver), what, driver);
  };
  const char* vocab_driver = d.vocab >= d.dim ? "vocab" : "dim";
  const int64_t table = weight(d.vocab, "the embedding (vocab x dim)", vocab_driver);
  const int64_t attention = weight(d.dim, "an attention weight (dim x dim)", "dim");
  int64_t ffn = weight(d.ffn_hidden, "a feed-forward weight (ffn_hidden x dim)", "dim");
  if (d.moe.enabled()) {
    const int64_t width = d.moe.expert_hidden > 0 ? d.moe.expert_hidden : d.ffn_hidden;
    const int64_t expert = weight(width, "an expert weight (expert_hidden x dim)", "dim");
    const int64_t experts = checked_mul(expert, d.moe.num_experts, where + "a block's expert elements", "experts");
    const int64_t shared =
        checked_mul(d.moe.num_shared_experts, width, where + "shared expert width", "shared_experts");
    ffn = checked_add(experts, weight(shared, "a shared expert weight", "shared_experts"), where + "MoE elements",
                      "experts");
  }
  const std::string block = "a block";
  const int64_t per_block = bounded(checked_add(checked_mul(4, attention, where + block, "dim"),
                                                checked_mul(3, ffn, where + block, "dim"), where + block, "dim"),
                                    block, "dim");
  const int64_t blocks = checked_mul(per_block, d.layers, where + "the blocks' elements", "layers");
  bounded(checked_add(blocks, 2 * table, where + "the model's elements", "layers"), "the model",
          blocks >= 2 * table ? "layers" : vocab_driver);
}

}  // namespace

ModelSpec make_llama(std::string name, ModelDims d) {
  if (d.dim <= 0 || d.layers <= 0 || d.n_heads <= 0 || d.vocab <= 0 || d.n_kv_heads < 0 || d.ffn_hidden <= 0) {
    throw SpecError("llama config '" + name + "': dim, layers, n_heads, vocab and ffn_hidden must be positive");
  }
  check_llama_sizes("llama config '" + name + "': ", d);
  if (d.n_kv_heads == 0) d.n_kv_heads = d.n_heads;
  if (d.moe.enabled() && d.moe.expert_hidden == 0) d.moe.expert_hidden = d.ffn_hidden;
  const int64_t head_dim = d.dim / d.n_heads, hidden = d.ffn_hidden, expert_hidden = d.expert_width();
  ModelSpec m;
  m.name = std::move(name);
  m.dims = d;

  m.units.push_back(
      UnitSpec{"tok_embeddings", false, {param("tok_embeddings.weight", {d.vocab, d.dim}, ParamKind::kEmbedding)}});
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    UnitSpec u{"layers." + std::to_string(i), true, {}};
    u.params.push_back(param(p + "attention.wq.weight", {d.n_heads * head_dim, d.dim}));
    u.params.push_back(param(p + "attention.wk.weight", {d.n_kv_heads * head_dim, d.dim}));
    u.params.push_back(param(p + "attention.wv.weight", {d.n_kv_heads * head_dim, d.dim}));
    u.params.push_back(param(p + "attention.wo.weight", {d.dim, d.n_heads * head_dim}));
    if (d.moe.enabled()) {
      u.params.push_back(param(p + "moe.router.gate.weight", {d.moe.num_experts, d.dim}));
      for (int64_t e = 0; e < d.moe.num_experts; ++e) {
        const std::string ep = p + "moe.experts." + std::to_string(e) + ".";
        u.params.push_back(param(ep + "w1.weight", {expert_hidden, d.dim}, ParamKind::kExpert));
        u.params.push_back(param(ep + "w2.weight", {d.dim, expert_hidden}, ParamKind::kExpert));
        u.params.push_back(param(ep + "w3.weight", {expert_hidden, d.dim}, ParamKind::kExpert));
      }
      if (d.moe.num_shared_experts > 0) {  // dense: every token uses it
        const int64_t sh = d.moe.shared_hidden();
        u.params.push_back(param(p + "moe.shared_experts.w1.weight", {sh, d.dim}));
        u.params.push_back(param(p + "moe.shared_experts.w2.weight", {d.dim, sh}));
        u.params.push_back(param(p + "moe.shared_experts.w3.weight", {sh, d.dim}));
      }
    } else {
      u.params.push_back(param(p + "feed_forward.w1.weight", {hidden, d.dim}));
      u.params.push_back(param(p + "feed_forward.w2.weight", {d.dim, hidden}));
      u.params.push_back(param(p + "feed_forward.w3.weight", {hidden, d.dim}));
    }
    u.params.push_back(param(p + "attention_norm.weight", {d.dim}));
    u.params.push_back(param(p + "ffn_norm.weight", {d.dim}));
    m.units.push_back(std::move(u));
  }
  m.units.push_back(
      UnitSpec{"output", false, {param("norm.weight", {d.dim}), param("output.weight", {d.vocab, d.dim})}});
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
    if (name == p.name) return make_llama(p.name, p.dims);
  }
  std::string known;
  for (const auto& p : presets()) known += std::string(known.empty() ? "" : ", ") + p.name;
  throw SpecError("unknown model '" + std::string(name) + "' (known presets: " + known +
                  "; or pass a path to a .toml model spec)");
}

}  // namespace fsdp::spec
