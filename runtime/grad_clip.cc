#include "runtime/grad_clip.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/errors.h"

namespace fsdp::runtime {
namespace {

bool is_max_norm(double norm_type) { return norm_type == std::numeric_limits<double>::infinity(); }

// One accumulator over every span in order (not a partial sum per span): for p = 2 the bits of the sum
// FsdpModel::clip_grad_norm computed before this file existed, so fsdp-train's norms did not move.
template <typename Term>
double sum_terms(std::span<const std::span<const float>> values, Term term) {
  double acc = 0;
  for (auto v : values) {
    for (float g : v) acc += term(static_cast<double>(g));
  }
  return acc;
}

double max_abs(std::span<const std::span<const float>> values) {
  double acc = 0;
  for (auto v : values) {
    for (float g : v) {
      const double a = std::abs(static_cast<double>(g));
      if (a > acc || std::isnan(a)) acc = a;  // a NaN stays (nothing compares above it)
    }
  }
  return acc;
}

double root(double total, double norm_type) {
  if (is_max_norm(norm_type) || norm_type == 1) return total;
  if (norm_type == 2) return std::sqrt(total);
  return std::pow(total, 1.0 / norm_type);
}

std::vector<std::span<const float>> as_const(std::span<const std::span<float>> spans) {
  return {spans.begin(), spans.end()};
}

}  // namespace

double grad_norm_term(std::span<const std::span<const float>> values, double norm_type) {
  if (!(norm_type > 0)) {
    throw InvalidArgument("clip_grad_norm: norm_type " + std::to_string(norm_type) +
                          " is not a norm (want p > 0: 2, inf, 1, 1.5, ...)");
  }
  if (is_max_norm(norm_type)) return max_abs(values);
  if (norm_type == 2) return sum_terms(values, [](double g) { return g * g; });
  if (norm_type == 1) return sum_terms(values, [](double g) { return std::abs(g); });
  return sum_terms(values, [norm_type](double g) { return std::pow(std::abs(g), norm_type); });
}

double total_grad_norm(std::span<const std::span<const float>> shards,
                       std::span<const std::span<const float>> replicated, Communicator* shard_group,
                       double norm_type) {
  const bool max = is_max_norm(norm_type);
  double local = grad_norm_term(shards, norm_type);
  // The collectives' max drops a NaN operand; an infinite norm says as much.
  if (max && std::isnan(local)) local = std::numeric_limits<double>::infinity();
  double total = local;
  if (shard_group) {
    const ReduceOp op = max ? ReduceOp{ReduceKind::kMax, 1.0} : ReduceOp::sum();
    shard_group->all_reduce(&local, &total, 1, DataType::kFloat64, op).wait();
  }
  if (!replicated.empty()) {
    const double rest = grad_norm_term(replicated, norm_type);
    total = max ? (rest > total || std::isnan(rest) ? rest : total) : total + rest;
  }
  return root(total, norm_type);
}

float clip_scale(double norm, double max_norm) {
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) return static_cast<float>(max_norm / (norm + 1e-6));
  return 1.0f;
}

void scale_grads(std::span<const std::span<float>> grads, float scale) {
  if (scale == 1.0f) return;
  for (auto g : grads) {
    for (float& x : g) x *= scale;
  }
}

double clip_grad_norm(std::span<const std::span<float>> shards, std::span<const std::span<float>> replicated,
                      Communicator* shard_group, double max_norm, double norm_type) {
  const double norm = total_grad_norm(as_const(shards), as_const(replicated), shard_group, norm_type);
  const float scale = clip_scale(norm, max_norm);
  scale_grads(shards, scale);
  scale_grads(replicated, scale);
  return norm;
}

}  // namespace fsdp::runtime
