// A model as the planner sees it: FSDP units (one all-gather each) holding named parameters with shapes
// and storage dtypes, plus the optional transformer dimensions the FLOP and activation estimates need.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"

namespace fsdp::spec {

// What a parameter costs in FLOPs: dense matmul weights do 6 FLOPs per element per token (forward and
// backward), an embedding table is a lookup (no FLOPs), an expert's weight is used by only
// experts_per_token of num_experts experts.
enum class ParamKind { kDense, kEmbedding, kExpert };

std::string_view name(ParamKind k);
ParamKind parse_param_kind(std::string_view s);  // "dense", "embedding", "expert"; throws SpecError

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;           // empty for a scalar
  DataType dtype = DataType::kFloat32;  // storage dtype of the sharded (master) parameter
  ParamKind kind = ParamKind::kDense;

  int64_t numel() const;
  int64_t rows() const;       // dim 0, the dimension FSDP shards; 1 for a scalar
  int64_t row_numel() const;  // product of the remaining dims
};

struct UnitSpec {
  std::string name;
  bool is_layer = false;  // a transformer block: carries attention FLOPs and per-layer activations
  std::vector<ParamSpec> params;
  // The routed experts of a MoE block under expert parallelism (sharding/expert_parallel.h): sharded over
  // the expert FSDP group, not the whole shard group.
  bool experts = false;

  int64_t numel() const;
};

// How a MoE router scores and weighs its top-k choices (TorchTitan's MoEArgs score_func, route_norm,
// route_scale) and the weight of its load-balancing loss. The planner ignores it; the reference model's
// router (model/moe_router.h) follows it.
struct MoeRouting {
  bool sigmoid = false;        // score_func: softmax over the experts (false) or sigmoid per expert
  bool route_norm = false;     // the k weights of a token divided by their sum
  double route_scale = 1.0;    // then multiplied by this
  double aux_loss_coeff = 0.0; // batch-level load-balancing loss coefficient (0: off)
};

// Transformer dimensions; all zero when unknown (then FLOPs come from parameters only and activations
// are not estimated).
struct ModelDims {
  int64_t layers = 0;
  int64_t dim = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t num_experts = 0;        // 0 for a dense model
  int64_t experts_per_token = 0;  // top-k routing
  int64_t expert_hidden = 0;      // SwiGLU width of one routed expert; 0: ffn_hidden
  int64_t shared_experts = 0;     // always-on shared expert of width shared_experts * expert width
  MoeRouting routing;

  bool known() const { return layers > 0 && dim > 0; }
  int64_t head_dim() const { return n_heads > 0 ? dim / n_heads : 0; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  int64_t expert_width() const { return expert_hidden > 0 ? expert_hidden : ffn_hidden; }
};

struct ModelSpec {
  std::string name;
  ModelDims dims;
  std::vector<UnitSpec> units;

  int64_t num_params() const;
  // Parameters a token's matmuls touch: dense ones, plus experts scaled by experts_per_token/num_experts;
  // embeddings excluded. 6 * this is the matmul FLOPs per token of a training step.
  double active_matmul_params() const;
};

// Throws SpecError on empty names, no units, zero or negative dims, unsupported dtypes, duplicate names.
void validate(const ModelSpec& model);

// Presets: "llama3-debug", "debugmodel_byte", "debugmodel_byte_moe", "llama3-8b", "llama3-70b", "llama3-405b",
// "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite".
std::vector<std::string> model_preset_names();
ModelSpec model_preset(std::string_view name);  // throws SpecError naming the known presets

// Llama 3 architecture as TorchTitan builds it (untied output head, SwiGLU FFN, GQA).
struct LlamaConfig {
  int64_t dim = 0;
  int64_t layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // 0: same as n_heads
  int64_t vocab = 0;
  int64_t multiple_of = 256;
  double ffn_dim_multiplier = 0;  // 0: none
  int64_t num_experts = 0;        // > 0: MoE FFN with this many SwiGLU experts and a router
  int64_t experts_per_token = 0;
  int64_t expert_hidden = 0;      // a routed expert's width; 0: the dense FFN width below
  int64_t shared_experts = 0;     // > 0: a shared expert (moe.shared_experts.w1/w2/w3) this many experts wide
  MoeRouting routing;
};
// TorchTitan's FFN width: int(2 * 4 * dim / 3), times the multiplier, rounded up to multiple_of.
int64_t llama_ffn_hidden(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier);
ModelSpec make_llama(std::string name, const LlamaConfig& config);
// fsdp-train's "debugmodel_byte" flavor (also the planner preset of that name): a Llama 3 small enough to
// train on two CPU cores, with a byte-level vocabulary.
LlamaConfig debug_model_config();
// fsdp-train's "debugmodel_byte_moe" flavor: debug_model_config() with each FFN a mixture of 8 experts of
// width 128, top 2, plus one shared expert of 128: the same active FFN width per token (384) as the
// dense debugmodel_byte.
LlamaConfig debug_moe_model_config();

// TOML model spec (format in docs/planner.md). Errors name the file and line.
ModelSpec parse_model_spec(std::string_view toml_text, std::string_view source_name);
ModelSpec load_model_spec_file(const std::string& path);

// A preset name, or a path to a .toml spec file.
ModelSpec resolve_model(const std::string& name_or_path);

}  // namespace fsdp::spec
