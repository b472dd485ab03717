#include "spec/model_spec.h"

#include <filesystem>
#include <limits>
#include <set>

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
      dims.num_experts > 0 ? static_cast<double>(dims.experts_per_token) / static_cast<double>(dims.num_experts) : 1.0;
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
  // Each parameter's element count must fit int64 with room to pad and multiply by 8-byte dtypes.
  constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / 1024;
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
      if (!is_valid(p.dtype) || !is_floating(p.dtype)) throw SpecError(pw + "dtype must be a floating type");
      if (p.kind == ParamKind::kExpert && model.dims.num_experts <= 0) {
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
                          {d.num_experts, "experts"},
                          {d.experts_per_token, "experts_per_token"},
                          {d.expert_hidden, "expert_hidden"},
                          {d.shared_experts, "shared_experts"}}) {
    if (v < 0) throw SpecError(where + field + " is " + std::to_string(v) + " (must not be negative)");
  }
  if (d.num_experts > 0 && (d.experts_per_token <= 0 || d.experts_per_token > d.num_experts)) {
    throw SpecError(where + "experts_per_token must be in [1, experts]");
  }
  if (d.n_heads > 0 && d.dim % d.n_heads != 0) throw SpecError(where + "dim must be a multiple of n_heads");
  if (d.n_kv_heads > 0 && d.n_heads % d.n_kv_heads != 0) {
    throw SpecError(where + "n_heads must be a multiple of n_kv_heads");
  }
}

ModelSpec resolve_model(const std::string& name_or_path) {
  const bool looks_like_file =
      name_or_path.find('/') != std::string::npos || (name_or_path.size() > 5 && name_or_path.ends_with(".toml"));
  if (looks_like_file || std::filesystem::exists(name_or_path)) return load_model_spec_file(name_or_path);
  return model_preset(name_or_path);
}

}  // namespace fsdp::spec
