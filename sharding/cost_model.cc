#include "sharding/cost_model.h"

#include <algorithm>

#include "sharding/step_program.h"
#include "spec/checked_size.h"

namespace fsdp::sharding {

namespace {

int64_t shard_bytes(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units) {
  int64_t bytes = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const auto& params = units[u].params();
    for (size_t p = 0; p < params.size(); ++p) {
      bytes += params[p].shard_numel() * static_cast<int64_t>(element_size(model.units[u].params[p].dtype));
    }
  }
  return bytes;
}

}  // namespace

int64_t param_shard_bytes(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units) {
  return shard_bytes(model, units);
}

int64_t grad_shard_bytes(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units) {
  return shard_bytes(model, units);
}

int64_t optimizer_state_bytes(int64_t shard_numel, spec::Optimizer optimizer) {
  return shard_numel * spec::optimizer_state_bytes_per_element(optimizer);
}

int64_t compute_element_bytes(DataType param_dtype, bool fp32_compute) {
  return fp32_compute ? 4 : static_cast<int64_t>(element_size(param_dtype));
}

int64_t activation_element_bytes(DataType param_dtype, bool fp32_compute) {
  return fp32_compute ? 4 : std::max<int64_t>(2, static_cast<int64_t>(element_size(param_dtype)));
}

int64_t expert_parallel_saved_elements_per_token(const spec::ModelDims& d, int64_t expert_parallel) {
  if (expert_parallel <= 1 || d.moe.num_experts == 0) return 0;
  return d.moe.top_k * 3 * d.dim;
}

int64_t layer_saved_elements_per_token(const spec::ModelDims& d, spec::ActivationCheckpointing ac,
                                       int64_t expert_parallel) {
  const int64_t ep_saved = expert_parallel_saved_elements_per_token(d, expert_parallel);
  const int64_t ffn =
      d.moe.num_experts > 0 ? d.expert_width() * (d.moe.top_k + d.moe.num_shared_experts) : d.ffn_hidden;
  const int64_t kv = d.n_heads > 0 ? d.kv_dim() : d.dim;
  // A MoE FFN also keeps its routing and the expert-major copies of its input and output
  // (model/moe_feed_forward.h): E scores, k weights and k weight gradients, 2k*dim grouped rows and 3k
  // int32 indices per token.
  const int64_t k = d.moe.top_k;
  const int64_t routing = d.moe.num_experts > 0 ? d.moe.num_experts + 2 * k + 2 * k * d.dim + 3 * k : 0;
  switch (ac) {
    case spec::ActivationCheckpointing::kNone:
      return 6 * d.dim + 2 * kv + 4 * ffn + routing + ep_saved;
    case spec::ActivationCheckpointing::kSelective:
      // Kept: block input, q, v, attention output, w1 output (every second matmul's output, k, wo's
      // residual h and w3's, is recomputed with the norms and the SwiGLU product); a MoE feed-forward
      // keeps all its saves.
      return 3 * d.dim + kv + (d.moe.num_experts > 0 ? 4 * ffn + routing + ep_saved : ffn);
    case spec::ActivationCheckpointing::kFull:
      return d.dim;
  }
  return 0;
}

int64_t layer_saved_stats_per_token(const spec::ModelDims& d, spec::ActivationCheckpointing ac) {
  switch (ac) {
    case spec::ActivationCheckpointing::kNone:
      return 2 + d.n_heads;
    case spec::ActivationCheckpointing::kSelective:
      return d.n_heads;
    case spec::ActivationCheckpointing::kFull:
      return 0;
  }
  return 0;
}

namespace {

bool has_embedding(const spec::UnitSpec& u) {
  for (const auto& p : u.params) {
    if (p.kind == spec::ParamKind::kEmbedding) return true;
  }
  return false;
}

}  // namespace

std::vector<UnitMemory> unit_memory(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units,
                                    const spec::Policy& policy, bool fp32_compute, int64_t expert_parallel) {
  const spec::ModelDims& d = model.dims;
  const char* tokens_driver = policy.seq_len >= policy.micro_batch ? "seq_len" : "micro_batch";
  const int64_t tokens = spec::checked_mul(policy.seq_len, policy.micro_batch, "tokens", tokens_driver);
  const int64_t a = activation_element_bytes(policy.param_dtype, fp32_compute);
  // Bytes per token x tokens, refused (SizeOverflow) where they overflow int64. The per-token counts
  // are sums of a validated model's weight dimensions (each at most kMaxModelElements): they fit.
  const auto per_tokens = [&](int64_t bytes_per_token, const char* what, const char* driver) {
    return spec::checked_mul(tokens, bytes_per_token, what, driver);
  };
  std::vector<UnitMemory> out(units.size());
  int64_t layer = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    out[i].flat_numel = units[i].flat_numel();
    out[i].chunk_numel = units[i].chunk_numel();
    out[i].numel = units[i].numel();
    out[i].keeps_group_slice = !model.units[i].experts;
    if (!d.known()) continue;
    const spec::UnitSpec& spec = model.units[i];
    if (spec.is_layer) {
      const spec::ActivationCheckpointing ac = spec::block_ac(policy, layer++);
      const int64_t saved = layer_saved_elements_per_token(d, ac, expert_parallel);
      const int64_t full = layer_saved_elements_per_token(d, spec::ActivationCheckpointing::kNone, expert_parallel);
      const int64_t stats = layer_saved_stats_per_token(d, ac);  // fp32
      const int64_t all_stats = layer_saved_stats_per_token(d, spec::ActivationCheckpointing::kNone);
      const int64_t q_dim = d.n_heads * d.head_dim();
      out[i].activations = per_tokens(saved * a + stats * 4, "a block's activations", tokens_driver);
      // What checkpointing drops: held while the forward computes it, and again while the backward
      // recomputes and consumes it.
      const int64_t recomputed =
          per_tokens((full - saved) * a + (all_stats - stats) * 4, "a block's recomputed activations", tokens_driver);
      out[i].forward_scratch = recomputed;
      // Gradient temporaries (d norm output, d attention output, dq, dk, dv) and the recomputed tensors.
      int64_t scratch = spec::checked_add(
          per_tokens((d.dim + 2 * q_dim + 2 * d.kv_dim()) * a, "a block's gradient temporaries", tokens_driver),
          recomputed, "a block's backward scratch", tokens_driver);
      // Without fused attention kernels (fp32 compute: the CPU reference) the softmax of one
      // (sequence, head) pair is recomputed at a time with its gradient: 2 * seq^2 fp32.
      if (fp32_compute) {
        const char* scores = "a block's attention scores (2 x seq_len^2 x 4 bytes)";
        scratch =
            spec::checked_add(scratch,
                              spec::checked_mul(spec::checked_mul(policy.seq_len, policy.seq_len, scores, "seq_len"), 8,
                                                scores, "seq_len"),
                              scores, "seq_len");
      }
      out[i].backward_scratch = scratch;
    } else if (i + 1 == units.size() && !has_embedding(spec)) {
      // The output head: its input and normed input, their inverse RMS, the targets, and the logits with
      // their fp32 softmax (one buffer when the logits are fp32 already).
      const int64_t logits = a == 4 ? 4 : a + 4;
      // PyTorch eager: only the log-softmax (fp32) stays saved; during the forward the logits and their
      // fp32 copy (the same tensor when the logits are fp32) live beside it, and in backward the
      // log-softmax's incoming gradient and its result (fp32 each) beside the saved output.
      const bool eager = policy.loss == spec::LossImpl::kEager;
      // Logits of tokens x vocab: the larger of the two drives them.
      const char* driver = d.vocab >= tokens ? "vocab" : tokens_driver;
      out[i].activations =
          per_tokens(2 * d.dim * a + 4 + 4 + d.vocab * (eager ? 4 : logits), "the head's logits", driver);
      if (eager) {
        out[i].forward_scratch = per_tokens(d.vocab * logits, "the head's logits", driver);
        out[i].backward_scratch = per_tokens(d.vocab * 8, "the head's logit gradients", driver);
      }
    }
  }
  return out;
}

MemoryTimeline simulate_memory(const std::vector<UnitMemory>& units, int64_t base, const spec::Policy& policy,
                               int64_t shard_degree, bool fp32_compute, int64_t buddy_grad_bytes) {
  // The step program keeps the bytes (sharding/step_program.h); times play no part in them.
  StepSpec spec{.policy = policy, .shard_degree = shard_degree, .fp32_compute = fp32_compute, .base_bytes = base};
  spec.buddy_grad_bytes = buddy_grad_bytes;
  spec.units.resize(units.size());
  for (size_t i = 0; i < units.size(); ++i) spec.units[i].memory = units[i];
  return step_program(spec).memory;
}

namespace {

// experts_per_token of the experts a unit holds: all of them, or a rank's local experts under expert
// parallelism (w1 w2 w3 each).
double active_expert_fraction(const spec::UnitSpec& unit, const spec::ModelDims& dims) {
  int64_t experts = dims.moe.num_experts;
  if (unit.experts) {
    experts = 0;
    for (const auto& p : unit.params) experts += p.kind == spec::ParamKind::kExpert ? 1 : 0;
    experts /= 3;
  }
  return experts > 0 ? static_cast<double>(dims.moe.top_k) / static_cast<double>(experts) : 1.0;
}

}  // namespace

double unit_flops_per_token(const spec::UnitSpec& unit, const spec::ModelDims& dims, int64_t seq_len) {
  const double expert_fraction = active_expert_fraction(unit, dims);
  double active = 0;
  for (const auto& p : unit.params) {
    if (p.kind == spec::ParamKind::kDense) active += static_cast<double>(p.numel());
    if (p.kind == spec::ParamKind::kExpert) active += expert_fraction * static_cast<double>(p.numel());
  }
  double flops = 6 * active;
  if (unit.is_layer) flops += 12.0 * static_cast<double>(dims.dim) * static_cast<double>(seq_len);
  return flops;
}

ExecutedFlops unit_executed_flops_per_token(const spec::UnitSpec& unit, const spec::ModelDims& dims, int64_t seq_len,
                                            bool fused_causal) {
  const double expert_fraction = active_expert_fraction(unit, dims);
  double matrices = 0;
  for (const auto& p : unit.params) {
    if (p.shape.size() < 2) continue;
    if (p.kind == spec::ParamKind::kDense) matrices += static_cast<double>(p.numel());
    if (p.kind == spec::ParamKind::kExpert) matrices += expert_fraction * static_cast<double>(p.numel());
  }
  ExecutedFlops f{2 * matrices, 4 * matrices};
  if (unit.is_layer) {
    const double q = static_cast<double>(dims.n_heads > 0 ? dims.n_heads * dims.head_dim() : dims.dim);
    const double t = static_cast<double>(seq_len) * q * (fused_causal ? 0.5 : 1.0);
    f.attention_forward = 4 * t;
    f.attention_backward = 10 * t;
    f.forward += f.attention_forward;
    f.backward += f.attention_backward;
  }
  return f;
}

ExecutedFlops unit_elementwise_bytes_per_token(const spec::UnitSpec& unit, const spec::ModelDims& d, int64_t seq_len,
                                               int64_t element_bytes, bool fused_causal, bool is_head) {
  if (!d.known() || unit.experts) return {};  // an expert unit's SwiGLU is counted with its block
  const auto dim = static_cast<double>(d.dim);
  const auto b = static_cast<double>(element_bytes);
  ExecutedFlops e;
  if (unit.is_layer) {
    const double q = static_cast<double>(d.n_heads > 0 ? d.n_heads * d.head_dim() : d.dim);
    const double kv = static_cast<double>(d.n_heads > 0 ? d.kv_dim() : d.dim);
    const double ffn = static_cast<double>(
        d.moe.num_experts > 0 ? d.expert_width() * (d.moe.top_k + d.moe.num_shared_experts) : d.ffn_hidden);
    const double scores = fused_causal ? 0.0 : static_cast<double>(d.n_heads) * static_cast<double>(seq_len);
    e.forward = (4 * dim + 2 * (q + kv) + 4 * ffn + 6 * dim + 5 * scores) * b;
    e.backward = (6 * dim + 2 * (q + kv) + 6 * ffn + 2 * dim + 8 * scores) * b;
  } else if (is_head) {
    const auto vocab = static_cast<double>(d.vocab);
    e.forward = (2 * dim + 3 * vocab) * b;
    e.backward = (3 * dim + 2 * vocab) * b;
  } else {
    e.forward = e.backward = 2 * dim * b;
  }
  return e;
}

double model_flops_per_token(const spec::ModelSpec& model, int64_t seq_len) {
  double f = 0;
  for (const auto& u : model.units) f += unit_flops_per_token(u, model.dims, seq_len);
  return f;
}

double unit_recompute_flops_per_token(const spec::UnitSpec& unit, const spec::ModelDims& dims, int64_t seq_len,
                                      spec::ActivationCheckpointing ac) {
  // A rank's expert unit is recomputed with its block under full checkpointing; selective keeps a MoE
  // feed-forward's saves.
  if (unit.experts)
    return ac == spec::ActivationCheckpointing::kFull ? unit_flops_per_token(unit, dims, seq_len) / 3 : 0;
  if (!unit.is_layer) return 0;
  if (ac == spec::ActivationCheckpointing::kFull) return unit_flops_per_token(unit, dims, seq_len) / 3;
  if (ac != spec::ActivationCheckpointing::kSelective) return 0;
  // The op-level policy's recomputed matmuls: wk, wo and (dense) w3, 2 FLOPs per multiply-add.
  const double kv = dims.n_heads > 0 ? static_cast<double>(dims.kv_dim()) : static_cast<double>(dims.dim);
  const double q = dims.n_heads > 0 ? static_cast<double>(dims.n_heads * dims.head_dim()) : static_cast<double>(dims.dim);
  const double ffn = dims.moe.num_experts > 0 ? 0.0 : static_cast<double>(dims.ffn_hidden);
  return 2.0 * static_cast<double>(dims.dim) * (kv + q + ffn);
}

double ring_bytes_sent(double bytes, int64_t n) {
  return n <= 1 ? 0 : bytes * static_cast<double>(n - 1) / static_cast<double>(n);
}

Link group_link(int64_t n, int64_t nodes, const Link& intra, const Link& inter) {
  if (nodes <= 1 || n <= 1) return intra;
  const double m = static_cast<double>(std::min(nodes, n));  // a group of n spans at most n servers
  const double local = std::max(1.0, static_cast<double>(n) / m);
  // Seconds per byte of the buffer, and latency, of the hierarchical collective.
  const double per_byte = (local - 1) / local / intra.bytes_per_s + (m - 1) / (m * local) / inter.bytes_per_s;
  const double latency = 2 * (local - 1) * intra.latency_s + (m - 1) * inter.latency_s;
  const double ring_share = static_cast<double>(n - 1) / static_cast<double>(n);
  return Link{ring_share / per_byte, latency / static_cast<double>(n - 1)};
}

double all_gather_seconds(double bytes, int64_t n, const Link& link) {
  if (n <= 1) return 0;
  return static_cast<double>(n - 1) * link.latency_s + ring_bytes_sent(bytes, n) / link.bytes_per_s;
}

double reduce_scatter_seconds(double bytes, int64_t n, const Link& link) { return all_gather_seconds(bytes, n, link); }

double all_reduce_seconds(double bytes, int64_t n, const Link& link) {
  return reduce_scatter_seconds(bytes, n, link) + all_gather_seconds(bytes, n, link);
}

AllToAllCost all_to_all_cost(double bytes, int64_t n, int64_t local, const Link& intra, const Link& inter) {
  AllToAllCost c;
  if (n <= 1) return c;
  local = std::clamp<int64_t>(local, 1, n);
  const double per_peer = bytes / static_cast<double>(n);
  c.intra_bytes = per_peer * static_cast<double>(local - 1);
  c.inter_bytes = per_peer * static_cast<double>(n - local);
  c.intra_seconds = static_cast<double>(local - 1) * intra.latency_s + c.intra_bytes / intra.bytes_per_s;
  c.inter_seconds = static_cast<double>(n - local) * inter.latency_s + c.inter_bytes / inter.bytes_per_s;
  return c;
}

double moe_all_to_all_bytes(const spec::ModelDims& dims, int64_t tokens, int64_t activation_bytes) {
  return static_cast<double>(tokens) * static_cast<double>(dims.moe.top_k) * static_cast<double>(dims.dim) *
         static_cast<double>(activation_bytes);
}

int64_t moe_all_to_alls(spec::ActivationCheckpointing ac) { return ac == spec::ActivationCheckpointing::kFull ? 6 : 4; }

double roofline_seconds(double flops, double peak_flops, double bytes_moved, double memory_bytes_per_s) {
  return std::max(flops / peak_flops, bytes_moved / memory_bytes_per_s);
}

}  // namespace fsdp::sharding
