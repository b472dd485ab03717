// TOML model specs: a [model] table (name and optional transformer dims) and [[units]], each with a
// name, an optional `layer = true` and its params (name, shape, dtype, kind). Format in docs/planner.md.
#include "common/toml_util.h"
#include "spec/model_spec.h"
#include "spec/spec_error.h"

namespace fsdp::spec {
namespace {

using namespace toml_util;

ParamSpec parse_param(std::string_view src, const toml::node& node) {
  const toml::table* t = node.as_table();
  if (t == nullptr) fail(src, node, "each entry of 'params' must be a table {name, shape, dtype, kind}");
  check_keys(src, *t, "a param", {"name", "shape", "dtype", "kind"});
  ParamSpec p;
  auto name = get_string(src, *t, "name");
  if (!name || name->empty()) fail(src, node, "param needs a non-empty 'name'");
  p.name = *name;
  const toml::node* shape = t->get("shape");
  if (shape == nullptr) fail(src, node, "param '" + p.name + "' needs a 'shape' (e.g. [4096, 4096])");
  const toml::array* dims = shape->as_array();
  if (dims == nullptr) fail(src, *shape, "'shape' of param '" + p.name + "' must be an array of integers");
  for (const auto& d : *dims) {
    if (!d.is_integer()) fail(src, d, "'shape' of param '" + p.name + "' must hold integers");
    const int64_t v = d.as_integer()->get();
    if (v <= 0) {
      fail(src, d, "param '" + p.name + "' has dimension " + std::to_string(v) + " (every dimension must be >= 1)");
    }
    p.shape.push_back(v);
  }
  if (auto dtype = get_string(src, *t, "dtype")) {
    auto parsed = parse_data_type(*dtype);
    if (!parsed || !is_floating(*parsed)) {
      fail(src, *t->get("dtype"), "unknown or non-floating dtype '" + *dtype + "' for param '" + p.name + "'");
    }
    p.dtype = *parsed;
  }
  if (auto kind = get_string(src, *t, "kind")) {
    try {
      p.kind = parse_param_kind(*kind);
    } catch (const SpecError& e) {
      fail(src, *t->get("kind"), e.what());
    }
  }
  return p;
}

}  // namespace

namespace {

ModelSpec parse_model_spec_document(std::string_view text, std::string_view src) {
  const toml::table doc = parse(text, src);
  check_keys(src, doc, "the top level", {"model", "units"});
  ModelSpec m;
  const toml::node* model_node = doc.get("model");
  if (model_node == nullptr || !model_node->is_table()) {
    throw SpecError(std::string(src) + ": missing [model] table with at least name = \"...\"");
  }
  const toml::table& mt = *model_node->as_table();
  check_keys(src, mt, "[model]",
             {"name", "layers", "dim", "n_heads", "n_kv_heads", "ffn_hidden", "vocab", "experts", "experts_per_token",
              "expert_hidden", "shared_experts"});
  auto name = get_string(src, mt, "name");
  if (!name || name->empty()) fail(src, mt, "[model] needs a non-empty name");
  m.name = *name;
  auto dim_field = [&](std::string_view key, int64_t& out) {
    if (auto v = get_int(src, mt, key)) {
      if (*v < 0) fail(src, *mt.get(key), "'" + std::string(key) + "' must not be negative");
      out = *v;
    }
  };
  dim_field("layers", m.dims.layers);
  dim_field("dim", m.dims.dim);
  dim_field("n_heads", m.dims.n_heads);
  dim_field("n_kv_heads", m.dims.n_kv_heads);
  dim_field("ffn_hidden", m.dims.ffn_hidden);
  dim_field("vocab", m.dims.vocab);
  dim_field("experts", m.dims.moe.num_experts);
  dim_field("experts_per_token", m.dims.moe.top_k);
  dim_field("expert_hidden", m.dims.moe.expert_hidden);
  dim_field("shared_experts", m.dims.moe.num_shared_experts);
  if (m.dims.n_kv_heads == 0) m.dims.n_kv_heads = m.dims.n_heads;

  const toml::node* units = doc.get("units");
  if (units == nullptr) throw SpecError(std::string(src) + ": no [[units]] (a model needs at least one FSDP unit)");
  const toml::array* ua = units->as_array();
  if (ua == nullptr) fail(src, *units, "'units' must be an array of tables ([[units]])");
  for (const auto& un : *ua) {
    const toml::table* ut = un.as_table();
    if (ut == nullptr) fail(src, un, "each unit must be a table ([[units]])");
    check_keys(src, *ut, "a unit", {"name", "layer", "params"});
    UnitSpec u;
    auto uname = get_string(src, *ut, "name");
    if (!uname || uname->empty()) fail(src, un, "unit needs a non-empty 'name'");
    u.name = *uname;
    u.is_layer = get_bool(src, *ut, "layer").value_or(false);
    const toml::node* params = ut->get("params");
    if (params == nullptr || !params->is_array() || params->as_array()->empty()) {
      fail(src, un, "unit '" + u.name + "' needs a non-empty 'params' array");
    }
    for (const auto& pn : *params->as_array()) u.params.push_back(parse_param(src, pn));
    m.units.push_back(std::move(u));
  }
  try {
    validate(m);
  } catch (const SpecError& e) {
    throw SpecError(std::string(src) + ": " + e.what());
  }
  return m;
}

}  // namespace

ModelSpec parse_model_spec(std::string_view text, std::string_view src) {
  return as_spec_error([&] { return parse_model_spec_document(text, src); });
}

ModelSpec load_model_spec_file(const std::string& path) {
  return parse_model_spec(as_spec_error([&] { return read_file(path); }), path);
}

}  // namespace fsdp::spec
