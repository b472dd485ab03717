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

int64_t bytes_of(int64_t numel, DataType t) { return numel * static_cast<int64_t>(element_size(t)); }

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

int64_t all_gather_buffer_bytes(int64_t largest_flat_numel, DataType param_dtype, int64_t prefetch) {
  return (1 + prefetch) * bytes_of(largest_flat_numel, param_dtype);
}

int64_t reduce_scatter_buffer_bytes(int64_t largest_flat_numel, int64_t largest_chunk_numel, DataType reduce_dtype) {
  return bytes_of(largest_flat_numel + largest_chunk_numel, reduce_dtype);
}

int64_t unsharded_grad_bytes(int64_t largest_flat_numel, DataType param_dtype) {
  return bytes_of(largest_flat_numel, param_dtype);
}

int64_t kept_param_bytes(const Reshard& reshard, int64_t total_flat_numel, DataType param_dtype) {
  switch (reshard.mode) {
    case Reshard::Mode::kFull:
      return 0;
    case Reshard::Mode::kNone:
      return bytes_of(total_flat_numel, param_dtype);
    case Reshard::Mode::kGroup:
      return bytes_of(total_flat_numel / reshard.group, param_dtype);
  }
  return 0;
}

int64_t activation_element_bytes(DataType param_dtype) {
  return std::max<int64_t>(2, static_cast<int64_t>(element_size(param_dtype)));
}

int64_t layer_saved_elements_per_token(const ModelDims& d, ActivationCheckpointing ac) {
  const int64_t ffn = d.ffn_hidden * (d.num_experts > 0 ? d.experts_per_token : 1);
  const int64_t kv = d.n_heads > 0 ? d.kv_dim() : d.dim;
  switch (ac) {
    case ActivationCheckpointing::kNone:
      return 6 * d.dim + 2 * kv + 4 * ffn;
    case ActivationCheckpointing::kSelective:
      return 4 * d.dim + 2 * kv + 2 * ffn;
    case ActivationCheckpointing::kFull:
      return d.dim;
  }
  return 0;
}

int64_t activation_bytes(const ModelDims& d, int64_t seq_len, int64_t micro_batch, ActivationCheckpointing ac,
                         DataType param_dtype) {
  if (!d.known()) return 0;
  const int64_t tokens = seq_len * micro_batch;
  const int64_t a = activation_element_bytes(param_dtype);
  const int64_t saved = layer_saved_elements_per_token(d, ac);
  const int64_t full = layer_saved_elements_per_token(d, ActivationCheckpointing::kNone);
  int64_t per_token = d.layers * saved * a;
  if (ac != ActivationCheckpointing::kNone) per_token += (full - saved) * a;  // one block recomputed at a time
  per_token += d.dim * a;                                                     // embedding output
  per_token += d.vocab * (a + 4);                                             // logits and their fp32 softmax
  return tokens * per_token;
}

double unit_flops_per_token(const UnitSpec& unit, const ModelDims& dims, int64_t seq_len) {
  const double expert_fraction =
      dims.num_experts > 0 ? static_cast<double>(dims.experts_per_token) / static_cast<double>(dims.num_experts) : 1.0;
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
  if (ac != ActivationCheckpointing::kFull || !unit.is_layer) return 0;
  return unit_flops_per_token(unit, dims, seq_len) / 3;
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
    compute_end[i] = begin + units[i].forward;
    compute_free = compute_end[i];
    out.compute += units[i].forward;
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
    back_end[j] = begin + u.backward;
    compute_free = back_end[j];
    out.compute += u.backward;
    const double rs_end = std::max(reduce_free, back_end[j]) + u.reduce_scatter;
    reduce_free = rs_end;
    reduce_all_free = std::max(reduce_all_free, rs_end) + u.all_reduce;
  }
  out.total = std::max({compute_free, reduce_free, reduce_all_free});
  return out;
}

}  // namespace fsdp::sharding
