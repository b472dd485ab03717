#include "sharding/cost_model.h"

#include <algorithm>

namespace fsdp::sharding {

namespace {

int64_t shard_bytes(const ModelSpec& model, const std::vector<UnitShardLayout>& units) {
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

int64_t param_shard_bytes(const ModelSpec& model, const std::vector<UnitShardLayout>& units) {
  return shard_bytes(model, units);
}

int64_t grad_shard_bytes(const ModelSpec& model, const std::vector<UnitShardLayout>& units) {
  return shard_bytes(model, units);
}

int64_t optimizer_state_bytes(int64_t shard_numel, Optimizer optimizer) {
  return shard_numel * optimizer_state_bytes_per_element(optimizer);
}

int64_t compute_element_bytes(DataType param_dtype, bool fp32_compute) {
  return fp32_compute ? 4 : static_cast<int64_t>(element_size(param_dtype));
}

int64_t activation_element_bytes(DataType param_dtype, bool fp32_compute) {
  return fp32_compute ? 4 : std::max<int64_t>(2, static_cast<int64_t>(element_size(param_dtype)));
}

int64_t expert_parallel_saved_elements_per_token(const ModelDims& d, int64_t expert_parallel) {
  if (expert_parallel <= 1 || d.num_experts == 0) return 0;
  return d.experts_per_token * 3 * d.dim;
}

int64_t layer_saved_elements_per_token(const ModelDims& d, ActivationCheckpointing ac, int64_t expert_parallel) {
  const int64_t ep_saved = expert_parallel_saved_elements_per_token(d, expert_parallel);
  const int64_t ffn =
      d.num_experts > 0 ? d.expert_width() * (d.experts_per_token + d.shared_experts) : d.ffn_hidden;
  const int64_t kv = d.n_heads > 0 ? d.kv_dim() : d.dim;
  // A MoE FFN also keeps its routing and the expert-major copies of its input and output
  // (model/moe_feed_forward.h): E scores, k weights and k weight gradients, 2k*dim grouped rows and 3k
  // int32 indices per token.
  const int64_t k = d.experts_per_token;
  const int64_t routing = d.num_experts > 0 ? d.num_experts + 2 * k + 2 * k * d.dim + 3 * k : 0;
  switch (ac) {
    case ActivationCheckpointing::kNone:
      return 6 * d.dim + 2 * kv + 4 * ffn + routing + ep_saved;
    case ActivationCheckpointing::kSelective:
      // Kept: block input, q, v, attention output, w1 output (every second matmul's output, k, wo's
      // residual h and w3's, is recomputed with the norms and the SwiGLU product); a MoE feed-forward
      // keeps all its saves.
      return 3 * d.dim + kv + (d.num_experts > 0 ? 4 * ffn + routing + ep_saved : ffn);
    case ActivationCheckpointing::kFull:
      return d.dim;
  }
  return 0;
}

int64_t layer_saved_stats_per_token(const ModelDims& d, ActivationCheckpointing ac) {
  switch (ac) {
    case ActivationCheckpointing::kNone:
      return 2 + d.n_heads;
    case ActivationCheckpointing::kSelective:
      return d.n_heads;
    case ActivationCheckpointing::kFull:
      return 0;
  }
  return 0;
}

namespace {

bool has_embedding(const UnitSpec& u) {
  for (const auto& p : u.params) {
    if (p.kind == ParamKind::kEmbedding) return true;
  }
  return false;
}

}  // namespace

std::vector<UnitMemory> unit_memory(const ModelSpec& model, const std::vector<UnitShardLayout>& units,
                                    const Policy& policy, bool fp32_compute, int64_t expert_parallel) {
  const ModelDims& d = model.dims;
  const int64_t tokens = policy.seq_len * policy.micro_batch;
  const int64_t a = activation_element_bytes(policy.param_dtype, fp32_compute);
  std::vector<UnitMemory> out(units.size());
  int64_t layer = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    out[i].flat_numel = units[i].flat_numel();
    out[i].chunk_numel = units[i].chunk_numel();
    out[i].numel = units[i].numel();
    out[i].keeps_group_slice = !model.units[i].experts;
    if (!d.known()) continue;
    const UnitSpec& spec = model.units[i];
    if (spec.is_layer) {
      const ActivationCheckpointing ac = block_ac(policy, layer++);
      const int64_t saved = layer_saved_elements_per_token(d, ac, expert_parallel);
      const int64_t full = layer_saved_elements_per_token(d, ActivationCheckpointing::kNone, expert_parallel);
      const int64_t stats = layer_saved_stats_per_token(d, ac);  // fp32
      const int64_t all_stats = layer_saved_stats_per_token(d, ActivationCheckpointing::kNone);
      const int64_t q_dim = d.n_heads * d.head_dim();
      out[i].activations = tokens * (saved * a + stats * 4);
      // What checkpointing drops: held while the forward computes it, and again while the backward
      // recomputes and consumes it.
      const int64_t recomputed = tokens * ((full - saved) * a + (all_stats - stats) * 4);
      out[i].forward_scratch = recomputed;
      // Gradient temporaries (d norm output, d attention output, dq, dk, dv) and the recomputed tensors.
      int64_t scratch = tokens * (d.dim + 2 * q_dim + 2 * d.kv_dim()) * a + recomputed;
      // Without fused attention kernels (fp32 compute: the CPU reference) the softmax of one
      // (sequence, head) pair is recomputed at a time with its gradient: 2 * seq^2 fp32.
      if (fp32_compute) scratch += 2 * policy.seq_len * policy.seq_len * 4;
      out[i].backward_scratch = scratch;
    } else if (i + 1 == units.size() && !has_embedding(spec)) {
      // The output head: its input and normed input, their inverse RMS, the targets, and the logits with
      // their fp32 softmax (one buffer when the logits are fp32 already).
      const int64_t logits = a == 4 ? 4 : a + 4;
      out[i].activations = tokens * (2 * d.dim * a + 4 + 4 + d.vocab * logits);
    }
  }
  return out;
}

MemoryTimeline simulate_memory(const std::vector<UnitMemory>& units, int64_t base, const Policy& policy,
                               int64_t shard_degree, bool fp32_compute) {
  const int64_t pb = static_cast<int64_t>(element_size(policy.param_dtype));
  const int64_t cb = compute_element_bytes(policy.param_dtype, fp32_compute);
  const int64_t rb = static_cast<int64_t>(element_size(policy.reduce_dtype));
  const auto mode = policy.reshard.mode;
  const bool grouped = mode == Reshard::Mode::kGroup && policy.reshard.group < shard_degree;
  const int64_t group = grouped ? policy.reshard.group : 1;
  const int n = static_cast<int>(units.size());

  // MXFP8 wire slots of unit j, one per rank of its group (collectives/quantized.h).
  auto wire = [&](int j) {
    const int64_t chunk = std::max<int64_t>(units[j].chunk_numel, 1);
    return mxfp8_slot_bytes(chunk) * (units[j].flat_numel / chunk);
  };
  // What an all-gather holds in flight: the param-dtype flat buffer; with MXFP8 (but not when gathering a
  // kept slice) only the wire slots, which the copy-out decodes straight into the parameters.
  auto gather_bytes = [&](int j, bool from_kept) {
    return policy.param_comm == CommPrecision::kMxfp8 && !from_kept ? wire(j) : units[j].flat_numel * pb;
  };
  // What a reduce-scatter holds: the flat input in the reduce dtype; with MXFP8 an f32 input plus the
  // sent and the received wire slots.
  auto reduce_bytes = [&](int j) {
    return policy.grad_comm == CommPrecision::kMxfp8 ? units[j].flat_numel * 4 + 2 * wire(j)
                                                      : units[j].flat_numel * rb;
  };

  MemoryTimeline tl;
  int64_t ag = 0, up = 0, kept = 0, ug = 0, rs = 0, act = 0;
  std::vector<int64_t> gathering(units.size(), 0);  // bytes each unit's all-gather in flight holds
  auto mark = [&] {
    tl.peak = std::max(tl.peak, base + ag + up + kept + ug + rs + act);
    tl.all_gather = std::max(tl.all_gather, ag);
    tl.unsharded_params = std::max(tl.unsharded_params, up);
    tl.kept_params = std::max(tl.kept_params, kept);
    tl.unsharded_grads = std::max(tl.unsharded_grads, ug);
    tl.reduce_scatter = std::max(tl.reduce_scatter, rs);
    tl.activations = std::max(tl.activations, act);
  };
  std::vector<char> in_flight(units.size(), 0), unsharded(units.size(), 0), has_kept(units.size(), 0),
      has_grads(units.size(), 0);
  auto issue = [&](int j) {
    if (j < 0 || j >= n || unsharded[j] || in_flight[j]) return;
    in_flight[j] = 1;
    gathering[j] = gather_bytes(j, has_kept[j] != 0);
    ag += gathering[j];
    mark();
  };
  // wait_unshard: allocate the parameters, copy out, keep a group slice, free the all-gather output.
  auto copy_out = [&](int j) {
    if (unsharded[j]) return;
    issue(j);
    up += units[j].numel * cb;
    mark();
    const int64_t slice = units[j].flat_numel / group * pb;
    if (has_kept[j]) {
      kept -= slice;
      has_kept[j] = 0;
    } else if (grouped && units[j].keeps_group_slice) {
      kept += slice;
      has_kept[j] = 1;
      mark();
    }
    ag -= gathering[j];
    in_flight[j] = 0;
    unsharded[j] = 1;
  };
  auto release_params = [&](int j) {
    if (!unsharded[j]) return;
    up -= units[j].numel * cb;
    unsharded[j] = 0;
  };

  int pending = -1;
  const int64_t micro_steps = std::min<int64_t>(policy.grad_accum, 2);  // no-sync micro-steps repeat
  for (int64_t m = 0; m < micro_steps; ++m) {
    const bool sync = m + 1 == micro_steps;
    for (int i = 0; i < n; ++i) {
      issue(i);
      for (int64_t k = 1; k <= policy.prefetch; ++k) issue(i + static_cast<int>(k));
      copy_out(i);
      act += units[i].activations + units[i].forward_scratch;
      mark();
      act -= units[i].forward_scratch;
      if (policy.reshard.reshards(i, n)) release_params(i);
    }
    for (int i = n - 1; i >= 0; --i) {
      issue(i);
      for (int64_t k = 1; k <= policy.prefetch; ++k) issue(i - static_cast<int>(k));
      copy_out(i);
      if (!has_grads[i]) {
        ug += units[i].numel * cb;
        has_grads[i] = 1;
        mark();
      }
      act += units[i].backward_scratch;
      mark();
      act -= units[i].backward_scratch + units[i].activations;
      release_params(i);
      if (!sync) continue;
      if (pending >= 0) rs -= reduce_bytes(pending);
      rs += reduce_bytes(i);
      mark();
      ug -= units[i].numel * cb;
      has_grads[i] = 0;
      pending = i;
    }
  }
  return tl;
}

double unit_flops_per_token(const UnitSpec& unit, const ModelDims& dims, int64_t seq_len) {
  int64_t experts = dims.num_experts;
  if (unit.experts) {  // a rank's local experts under expert parallelism: w1 w2 w3 each
    experts = 0;
    for (const auto& p : unit.params) experts += p.kind == ParamKind::kExpert ? 1 : 0;
    experts /= 3;
  }
  const double expert_fraction =
      experts > 0 ? static_cast<double>(dims.experts_per_token) / static_cast<double>(experts) : 1.0;
  double active = 0;
  for (const auto& p : unit.params) {
    if (p.kind == ParamKind::kDense) active += static_cast<double>(p.numel());
    if (p.kind == ParamKind::kExpert) active += expert_fraction * static_cast<double>(p.numel());
  }
  double flops = 6 * active;
  if (unit.is_layer) flops += 12.0 * static_cast<double>(dims.dim) * static_cast<double>(seq_len);
  return flops;
}

double model_flops_per_token(const ModelSpec& model, int64_t seq_len) {
  double f = 0;
  for (const auto& u : model.units) f += unit_flops_per_token(u, model.dims, seq_len);
  return f;
}

double unit_recompute_flops_per_token(const UnitSpec& unit, const ModelDims& dims, int64_t seq_len,
                                      ActivationCheckpointing ac) {
  // A rank's expert unit is recomputed with its block under full checkpointing; selective keeps a MoE
  // feed-forward's saves.
  if (unit.experts) return ac == ActivationCheckpointing::kFull ? unit_flops_per_token(unit, dims, seq_len) / 3 : 0;
  if (!unit.is_layer) return 0;
  if (ac == ActivationCheckpointing::kFull) return unit_flops_per_token(unit, dims, seq_len) / 3;
  if (ac != ActivationCheckpointing::kSelective) return 0;
  // The op-level policy's recomputed matmuls: wk, wo and (dense) w3, 2 FLOPs per multiply-add.
  const double kv = dims.n_heads > 0 ? static_cast<double>(dims.kv_dim()) : static_cast<double>(dims.dim);
  const double q = dims.n_heads > 0 ? static_cast<double>(dims.n_heads * dims.head_dim()) : static_cast<double>(dims.dim);
  const double ffn = dims.num_experts > 0 ? 0.0 : static_cast<double>(dims.ffn_hidden);
  return 2.0 * static_cast<double>(dims.dim) * (kv + q + ffn);
}

double ring_bytes_sent(double bytes, int64_t n) {
  return n <= 1 ? 0 : bytes * static_cast<double>(n - 1) / static_cast<double>(n);
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

double moe_all_to_all_bytes(const ModelDims& dims, int64_t tokens, int64_t activation_bytes) {
  return static_cast<double>(tokens) * static_cast<double>(dims.experts_per_token) * static_cast<double>(dims.dim) *
         static_cast<double>(activation_bytes);
}

int64_t moe_all_to_alls(ActivationCheckpointing ac) { return ac == ActivationCheckpointing::kFull ? 6 : 4; }

double roofline_seconds(double flops, double peak_flops, double bytes_moved, double memory_bytes_per_s) {
  return std::max(flops / peak_flops, bytes_moved / memory_bytes_per_s);
}

MicroStepTimes simulate_micro_step(const std::vector<UnitTimes>& units, int64_t prefetch) {
  const size_t n = units.size();
  MicroStepTimes out;
  std::vector<double> compute_end(n, 0.0);
  double gather_free = 0;
  double compute_free = 0;
  // Forward, unit order.
  for (size_t i = 0; i < n; ++i) {
    double start = gather_free;
    // The all-gather reuses the buffer of the unit prefetch + 1 places earlier: wait for its compute.
    if (i >= static_cast<size_t>(prefetch) + 1) start = std::max(start, compute_end[i - prefetch - 1]);
    const double gathered = start + units[i].all_gather_forward;
    gather_free = gathered;
    const double begin = std::max(compute_free, gathered);
    compute_end[i] = begin + units[i].forward + units[i].all_to_all_forward;
    compute_free = compute_end[i];
    out.compute += units[i].forward;
    out.all_to_all += units[i].all_to_all_forward;
  }
  // Backward, reverse order; position j is unit n - 1 - j.
  const double forward_end = compute_free;
  gather_free = std::max(gather_free, forward_end);
  std::vector<double> back_end(n, 0.0);
  double reduce_free = 0;
  double reduce_all_free = 0;
  for (size_t j = 0; j < n; ++j) {
    const auto& u = units[n - 1 - j];
    // Backward all-gathers may be issued during forward's tail only for buffers already free; keep it
    // simple and conservative: they start once forward is done.
    double start = gather_free;
    if (j >= static_cast<size_t>(prefetch) + 1) start = std::max(start, back_end[j - prefetch - 1]);
    const double gathered = start + u.all_gather_backward;
    gather_free = gathered;
    const double begin = std::max(compute_free, gathered);
    back_end[j] = begin + u.backward + u.all_to_all_backward;
    compute_free = back_end[j];
    out.compute += u.backward;
    out.all_to_all += u.all_to_all_backward;
    const double rs_end = std::max(reduce_free, back_end[j]) + u.reduce_scatter;
    reduce_free = rs_end;
    reduce_all_free = std::max(reduce_all_free, rs_end) + u.all_reduce;
  }
  out.total = std::max({compute_free, reduce_free, reduce_all_free});
  return out;
}

}  // namespace fsdp::sharding
