#include "spec/model_spec.h"

#include <filesystem>
#include <set>

#include "spec/checked_size.h"
#include "spec/spec_error.h"

namespace fsdp::spec {

std::string_view name(ParamKind k) {
  switch (k) {
    case ParamKind::kDense:
      return "dense";
    case ParamKind::kEmbedding:
      return "embedding";
    case ParamKind::kExpert:
      return "expert";
  }
  return "?";
}

ParamKind parse_param_kind(std::string_view s) {
  if (s == "dense") return ParamKind::kDense;
  if (s == "embedding") return ParamKind::kEmbedding;
  if (s == "expert") return ParamKind::kExpert;
  throw SpecError("unknown parameter kind '" + std::string(s) + "' (expected dense, embedding or expert)");
}

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ParamSpec::rows() const { return shape.empty() ? 1 : shape[0]; }

int64_t ParamSpec::row_numel() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t UnitSpec::numel() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t ModelSpec::num_params() const {
  int64_t n = 0;
  for (const auto& u : units) n += u.numel();
  return n;
}

double ModelSpec::active_matmul_params() const {
  const double expert_fraction =
      dims.moe.enabled() ? static_cast<double>(dims.moe.top_k) / static_cast<double>(dims.moe.num_experts) : 1.0;
  double n = 0;
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (p.kind == ParamKind::kDense) n += static_cast<double>(p.numel());
      if (p.kind == ParamKind::kExpert) n += expert_fraction * static_cast<double>(p.numel());
    }
  }
  return n;
}

void validate(const ModelSpec& model) {
  const std::string where = "model '" + model.name + "': ";
  if (model.name.empty()) throw SpecError("model has no name");
  if (model.units.empty()) throw SpecError(where + "no FSDP units");
  std::set<std::string> unit_names;
  std::set<std::string> param_names;
  // Each parameter's element count, and the model's, must fit int64 with room to pad and multiply by
  // 8-byte dtypes.
  constexpr int64_t kMaxElements = kMaxModelElements;
  int64_t total = 0;
  for (const auto& u : model.units) {
    if (u.name.empty()) throw SpecError(where + "a unit has no name");
    if (!unit_names.insert(u.name).second) throw SpecError(where + "duplicate unit name '" + u.name + "'");
    if (u.params.empty()) throw SpecError(where + "unit '" + u.name + "' has no parameters");
    for (const auto& p : u.params) {
      const std::string pw = where + "parameter '" + p.name + "' of unit '" + u.name + "': ";
      if (p.name.empty()) throw SpecError(where + "a parameter of unit '" + u.name + "' has no name");
      if (!param_names.insert(p.name).second) throw SpecError(where + "duplicate parameter name '" + p.name + "'");
      int64_t n = 1;
      for (size_t i = 0; i < p.shape.size(); ++i) {
        if (p.shape[i] <= 0) {
          throw SpecError(pw + "dimension " + std::to_string(i) + " is " + std::to_string(p.shape[i]) +
                          " (every dimension must be at least 1)");
        }
        if (n > kMaxElements / p.shape[i]) throw SpecError(pw + "too many elements");
        n *= p.shape[i];
      }
      total += n;  // both at most kMaxElements: no overflow
      if (total > kMaxElements)
        throw SizeOverflow(where + "more than " + std::to_string(kMaxElements) + " elements", "");
      if (!is_valid(p.dtype) || !is_floating(p.dtype)) throw SpecError(pw + "dtype must be a floating type");
      if (p.kind == ParamKind::kExpert && !model.dims.moe.enabled()) {
        throw SpecError(pw + "kind 'expert' needs the model's experts and experts_per_token");
      }
    }
  }
  const auto& d = model.dims;
  for (auto [v, field] : {std::pair{d.layers, "layers"},
                          {d.dim, "dim"},
                          {d.n_heads, "n_heads"},
                          {d.n_kv_heads, "n_kv_heads"},
                          {d.ffn_hidden, "ffn_hidden"},
                          {d.vocab, "vocab"},
                          {d.moe.num_experts, "experts"},
                          {d.moe.top_k, "experts_per_token"},
                          {d.moe.expert_hidden, "expert_hidden"},
                          {d.moe.num_shared_experts, "shared_experts"}}) {
    if (v < 0) throw SpecError(where + field + " is " + std::to_string(v) + " (must not be negative)");
  }
  if (d.moe.enabled() && (d.moe.top_k <= 0 || d.moe.top_k > d.moe.num_experts)) {
    throw SpecError(where + "experts_per_token must be in [1, experts]");
  }
  if (d.n_heads > 0 && d.dim % d.n_heads != 0) throw SpecError(where + "dim must be a multiple of n_heads");
  if (d.n_kv_heads > 0 && d.n_heads % d.n_kv_heads != 0) {
    throw SpecError(where + "n_heads must be a multiple of n_kv_heads");
  }
}

void validate_transformer(const ModelDims& d) {
  const auto fail = [](const std::string& what) { throw SpecError("model dims: " + what); };
  for (auto [v, field] : {std::pair{d.dim, "dim"},
                          {d.layers, "layers"},
                          {d.n_heads, "n_heads"},
                          {d.n_kv_heads, "n_kv_heads"},
                          {d.ffn_hidden, "ffn_hidden"},
                          {d.vocab, "vocab"}}) {
    if (v <= 0) fail(std::string(field) + " must be positive (got " + std::to_string(v) + ")");
  }
  if (d.dim % d.n_heads != 0) {
    fail("dim " + std::to_string(d.dim) + " is not divisible by n_heads " + std::to_string(d.n_heads));
  }
  if (d.n_heads % d.n_kv_heads != 0) {
    fail("n_heads " + std::to_string(d.n_heads) + " is not divisible by n_kv_heads " + std::to_string(d.n_kv_heads));
  }
  if (d.head_dim() % 2 != 0) fail("head_dim " + std::to_string(d.head_dim()) + " must be even for RoPE");
  if (!(d.norm_eps > 0)) fail("norm_eps must be positive");
  if (!(d.rope_theta > 0)) fail("rope_theta must be positive");
  if (d.rope_scaling && !(d.rope_scaling->high_freq_factor > d.rope_scaling->low_freq_factor)) {
    fail("rope high_freq_factor must exceed low_freq_factor");
  }
  if (d.moe.enabled()) validate(d.moe);
}

void validate(const MoeSpec& m) {
  const auto fail = [](const std::string& what) { throw SpecError("model dims: moe " + what); };
  if (m.num_experts <= 0) fail("num_experts must be positive (got " + std::to_string(m.num_experts) + ")");
  if (m.top_k < 1 || m.top_k > m.num_experts) {
    fail("top_k = " + std::to_string(m.top_k) + " must be in [1, num_experts = " + std::to_string(m.num_experts) + "]");
  }
  if (m.expert_hidden <= 0) fail("expert_hidden must be positive (got " + std::to_string(m.expert_hidden) + ")");
  if (m.num_shared_experts < 0) fail("num_shared_experts must not be negative");
  if (!(m.route_scale > 0)) fail("route_scale must be positive");
  if (!(m.aux_loss_coeff >= 0)) fail("aux_loss_coeff must not be negative");
  if (!(m.capacity_factor >= 0)) fail("capacity_factor must not be negative (0 is dropless)");
}

ModelSpec resolve_model(const std::string& name_or_path) {
  const bool looks_like_file =
      name_or_path.find('/') != std::string::npos || (name_or_path.size() > 5 && name_or_path.ends_with(".toml"));
  if (looks_like_file || std::filesystem::exists(name_or_path)) return load_model_spec_file(name_or_path);
  return model_preset(name_or_path);
}

}  // namespace fsdp::spec
