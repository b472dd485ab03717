#include "model/dims.h"

#include <stdexcept>
#include <string>

namespace fsdp::model {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("LlamaDims: " + what); }

}  // namespace

void LlamaDims::validate() const {
  auto positive = [](const char* field, int64_t v) {
    if (v <= 0) fail(std::string(field) + " must be positive (got " + std::to_string(v) + ")");
  };
  positive("dim", dim);
  positive("layers", layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("ffn_hidden", ffn_hidden);
  positive("vocab", vocab);
  if (dim % n_heads != 0) {
    fail("dim " + std::to_string(dim) + " is not divisible by n_heads " + std::to_string(n_heads));
  }
  if (n_heads % n_kv_heads != 0) {
    fail("n_heads " + std::to_string(n_heads) + " is not divisible by n_kv_heads " + std::to_string(n_kv_heads));
  }
  if (head_dim() % 2 != 0) fail("head_dim " + std::to_string(head_dim()) + " must be even for RoPE");
  if (!(norm_eps > 0)) fail("norm_eps must be positive");
  if (!(rope_theta > 0)) fail("rope_theta must be positive");
  if (moe.enabled()) moe.validate();
}

void MoeDims::validate() const {
  auto moe_fail = [](const std::string& what) { throw std::invalid_argument("MoeDims: " + what); };
  if (num_experts <= 0) moe_fail("num_experts must be positive (got " + std::to_string(num_experts) + ")");
  if (top_k < 1 || top_k > num_experts) {
    moe_fail("top_k = " + std::to_string(top_k) + " must be in [1, num_experts = " + std::to_string(num_experts) + "]");
  }
  if (expert_hidden <= 0) moe_fail("expert_hidden must be positive (got " + std::to_string(expert_hidden) + ")");
  if (num_shared_experts < 0) moe_fail("num_shared_experts must not be negative");
  if (!(route_scale > 0)) moe_fail("route_scale must be positive");
  if (!(aux_loss_coeff >= 0)) moe_fail("aux_loss_coeff must not be negative");
  if (!(capacity_factor >= 0)) moe_fail("capacity_factor must not be negative (0 is dropless)");
  if (expert_parallel < 1 || num_experts % expert_parallel != 0) {
    moe_fail("expert_parallel = " + std::to_string(expert_parallel) + " must divide num_experts = " +
             std::to_string(num_experts));
  }
}

LlamaDims LlamaDims::from_spec(const spec::ModelSpec& spec) {
  const auto& d = spec.dims;
  if (!d.known()) fail("model '" + spec.name + "' has no transformer dims (layers and dim unknown)");
  LlamaDims out;
  if (d.num_experts > 0) {
    out.moe.num_experts = d.num_experts;
    out.moe.top_k = d.experts_per_token;
    out.moe.expert_hidden = d.expert_width();
    out.moe.num_shared_experts = d.shared_experts;
    out.moe.score = d.routing.sigmoid ? RouterScore::kSigmoid : RouterScore::kSoftmax;
    out.moe.route_norm = d.routing.route_norm;
    out.moe.route_scale = static_cast<float>(d.routing.route_scale);
    out.moe.aux_loss_coeff = static_cast<float>(d.routing.aux_loss_coeff);
  }
  out.dim = d.dim;
  out.layers = d.layers;
  out.n_heads = d.n_heads;
  out.n_kv_heads = d.n_kv_heads > 0 ? d.n_kv_heads : d.n_heads;
  out.ffn_hidden = d.ffn_hidden;
  out.vocab = d.vocab;
  out.validate();
  return out;
}

}  // namespace fsdp::model
