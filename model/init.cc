#include "model/init.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <string_view>

#include "common/splitmix.h"

namespace fsdp::model {
namespace {


// FNV-1a: stable across processes and standard libraries, unlike std::hash.
uint64_t hash_name(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// Standard normal for counter i of stream key: Box-Muller over the two 32-bit halves of one hash.
double normal_at(uint64_t key, uint64_t i) {
  const uint64_t bits = splitmix64(key ^ splitmix64(i));
  const double u1 = (static_cast<double>(bits >> 32) + 1.0) * 0x1p-32;  // (0, 1]: log is finite
  const double u2 = static_cast<double>(bits & 0xFFFFFFFFull) * 0x1p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

InitScheme parse_init_scheme(std::string_view s) {
  if (s == "torchtitan") return InitScheme::kTorchTitan;
  if (s == "normal") return InitScheme::kNormal;
  throw std::invalid_argument("unknown init scheme '" + std::string(s) + "' (expected torchtitan or normal)");
}

InitDistribution init_distribution(const spec::ParamSpec& p, InitScheme scheme) {
  if (scheme == InitScheme::kNormal) return {};
  const std::string_view name = p.name;
  if (name == "tok_embeddings.weight") return {1.0, 0};
  if (name == "output.weight") {
    const double sd = 1.0 / std::sqrt(static_cast<double>(p.shape.back()));  // shape (vocab, dim)
    return {sd, 3 * sd};
  }
  const bool output_projection = name.ends_with(".attention.wo.weight") || name.ends_with(".w2.weight") ||
                                 name.ends_with(".w3.weight");
  if (output_projection && name.starts_with("layers.")) {
    const int64_t layer = std::stoll(std::string(name.substr(7, name.find('.', 7) - 7)));
    return {0.02 / std::sqrt(2.0 * static_cast<double>(layer + 1)), 0};
  }
  return {};
}

void init_parameter_range(const spec::ParamSpec& p, uint64_t seed, int64_t first, int64_t count, float* out,
                          InitScheme scheme) {
  if (first < 0 || count < 0 || first + count > p.numel()) {
    throw std::out_of_range("init_parameter_range: [" + std::to_string(first) + ", " + std::to_string(first + count) +
                            ") outside parameter '" + p.name + "' of " + std::to_string(p.numel()) + " elements");
  }
  if (p.shape.size() < 2) {
    for (int64_t i = 0; i < count; ++i) out[i] = 1.f;
    return;
  }
  const InitDistribution d = init_distribution(p, scheme);
  const uint64_t key = splitmix64(seed ^ splitmix64(hash_name(p.name)));
  for (int64_t i = 0; i < count; ++i) {
    const auto index = static_cast<uint64_t>(first + i);
    double x = d.stddev * normal_at(key, index);
    // A redraw comes from its own stream (attempt k), so the value stays a function of the index.
    for (uint64_t attempt = 1; d.cutoff > 0 && std::abs(x) > d.cutoff; ++attempt) {
      x = d.stddev * normal_at(splitmix64(key ^ attempt), index);
    }
    out[i] = static_cast<float>(x);
  }
}

void init_parameters(const spec::UnitSpec& unit, Grads out_params, uint64_t seed, InitScheme scheme) {
  if (out_params.size() != unit.params.size()) {
    throw std::invalid_argument("init_parameters: unit '" + unit.name + "' has " + std::to_string(unit.params.size()) +
                                " parameters, got " + std::to_string(out_params.size()) + " pointers");
  }
  for (size_t i = 0; i < unit.params.size(); ++i) {
    init_parameter_range(unit.params[i], seed, 0, unit.params[i].numel(), out_params[i], scheme);
  }
}

}  // namespace fsdp::model
