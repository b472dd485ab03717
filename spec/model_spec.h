// A model as the planner sees it: FSDP units (one all-gather each) holding named parameters with shapes
// and storage dtypes, plus the optional transformer dimensions the FLOP and activation estimates need.
#pragma once

#include <cstdint>
#include <optional>
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

// Llama 3.1's scaling of the RoPE frequencies (TorchTitan's llama3 models; model/ops.h applies it).
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;   // > low_freq_factor
  double original_context = 8192;  // TorchTitan's original_max_position_embeddings
};

// How the router turns logits into scores (TorchTitan's MoEArgs.score_func): softmax over the experts
// (Mixtral, Qwen3-MoE) or an independent sigmoid per expert (DeepSeek-V3, Llama 4).
enum class RouterScore { kSoftmax, kSigmoid };

// The mixture-of-experts feed-forward of every block (model/moe_feed_forward.h); num_experts == 0 is
// the dense SwiGLU FFN. Names follow TorchTitan's MoEArgs where they mean the same thing. The planner
// reads the widths and top_k; the routing fields are the reference model's (model/moe_router.h).
struct MoeSpec {
  int64_t num_experts = 0;
  int64_t top_k = 0;               // experts per token
  int64_t expert_hidden = 0;       // width of each routed expert's SwiGLU; 0: the dense ffn_hidden
  int64_t num_shared_experts = 0;  // > 0: one always-on SwiGLU of width num_shared_experts * expert width
  RouterScore score = RouterScore::kSoftmax;
  bool route_norm = false;  // divide the k routing weights of a token by their sum
  float route_scale = 1.f;  // then multiply them by this
  // Coefficient of the load-balancing auxiliary loss (Switch / DeepSeek "batch-level" form over the
  // micro-batch, see model/moe_router.h); 0 turns it off. Not TorchTitan's load_balance_coeff, which is
  // the update rate of its auxiliary-loss-free expert bias.
  float aux_loss_coeff = 0.f;
  // 0: dropless. > 0: each expert takes at most ceil(capacity_factor * tokens * top_k / num_experts)
  // (token, expert) pairs, first come (lowest token row) first served; the rest are dropped.
  float capacity_factor = 0.f;

  bool enabled() const { return num_experts > 0; }
  // The shared expert's SwiGLU width (expert_hidden resolved, as make_llama leaves it).
  int64_t shared_hidden() const { return num_shared_experts * expert_hidden; }
};

// The transformer's shape: everything a Llama-style block, embedding and head are built from. Sizes
// all zero when unknown (a spec file without them: FLOPs then come from parameters only and activations
// are not estimated). make_llama fills every field it derives (n_kv_heads, the FFN and expert widths).
struct ModelDims {
  int64_t dim = 0;
  int64_t layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // make_llama: 0 means n_heads
  int64_t vocab = 0;
  int64_t ffn_hidden = 0;  // the dense SwiGLU's width (llama_ffn_hidden for TorchTitan's rounding)
  float norm_eps = 1e-5f;
  float rope_theta = 10000.f;
  std::optional<RopeScaling> rope_scaling;  // unset: plain RoPE
  MoeSpec moe;

  bool known() const { return layers > 0 && dim > 0; }
  int64_t head_dim() const { return n_heads > 0 ? dim / n_heads : 0; }
  int64_t q_dim() const { return n_heads * head_dim(); }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  int64_t expert_width() const { return moe.expert_hidden > 0 ? moe.expert_hidden : ffn_hidden; }
};
// The checks the model's kernels rely on, naming the field: positive sizes, heads dividing dim, kv heads
// dividing heads, an even head dim (RoPE rotates pairs), positive norm_eps and rope_theta, and for MoE
// top_k in [1, num_experts], positive widths and non-negative factors. Throws SpecError.
void validate_transformer(const ModelDims& dims);
// The MoE part of those checks (an enabled MoeSpec).
void validate(const MoeSpec& moe);

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

// TorchTitan's FFN width: int(2 * 4 * dim / 3), times the multiplier (0: none), rounded up to multiple_of.
int64_t llama_ffn_hidden(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier);
// The Llama 3 architecture as TorchTitan builds it (untied output head, SwiGLU FFN or MoE, GQA) with the
// given dims: tok_embeddings, one unit per block, then norm + output. Fills n_kv_heads (0: n_heads) and
// a routed expert's width (0: ffn_hidden). Throws SpecError for non-positive sizes.
ModelSpec make_llama(std::string name, ModelDims dims);
// What make_llama builds at most, refused beyond with a SizeOverflow naming the field: elements of one
// weight and of the whole model (room to pad, and to count bytes of 8-byte dtypes several times over, in
// int64), blocks (one FSDP unit each: the spec, the plan and the runtime hold every unit) and experts.
inline constexpr int64_t kMaxModelElements = INT64_MAX / 1024;
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;
inline constexpr int64_t kMaxExperts = int64_t{1} << 16;
// The FFN rounding of debugmodel_byte (TorchTitan's multiple_of): fsdp-train reshapes its FFN with it
// when the model's dim is overridden.
inline constexpr int64_t kDebugModelMultipleOf = 64;
// fsdp-train's "debugmodel_byte" flavor (also the planner preset of that name): a Llama 3 small enough to
// train on two CPU cores, with a byte-level vocabulary.
ModelDims debug_model_dims();
// fsdp-train's "debugmodel_byte_moe" flavor: debug_model_dims() with each FFN a mixture of 8 experts of
// width 128, top 2, plus one shared expert of 128: the same active FFN width per token (384) as the
// dense debugmodel_byte.
ModelDims debug_moe_model_dims();

// TOML model spec (format in docs/planner.md). Errors name the file and line.
ModelSpec parse_model_spec(std::string_view toml_text, std::string_view source_name);
ModelSpec load_model_spec_file(const std::string& path);

// A preset name, or a path to a .toml spec file.
ModelSpec resolve_model(const std::string& name_or_path);

}  // namespace fsdp::spec
