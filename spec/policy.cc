#include "spec/policy.h"

#include <charconv>

#include "spec/checked_size.h"
#include "spec/job_spec.h"
#include "spec/mxfp8_wire.h"
#include "spec/spec_error.h"

namespace fsdp::spec {

std::string_view name(Optimizer o) { return o == Optimizer::kAdamW ? "adamw" : "sgd"; }

Optimizer parse_optimizer(std::string_view s) {
  if (s == "adamw" || s == "adam") return Optimizer::kAdamW;
  if (s == "sgd" || s == "sgd-momentum") return Optimizer::kSgdMomentum;
  throw SpecError("unknown optimizer '" + std::string(s) + "' (expected adamw or sgd)");
}

int64_t optimizer_state_bytes_per_element(Optimizer o) { return o == Optimizer::kAdamW ? 8 : 4; }

std::string_view name(ActivationCheckpointing ac) {
  switch (ac) {
    case ActivationCheckpointing::kNone:
      return "none";
    case ActivationCheckpointing::kSelective:
      return "selective";
    case ActivationCheckpointing::kFull:
      return "full";
  }
  return "?";
}

ActivationCheckpointing parse_activation_checkpointing(std::string_view s) {
  if (s == "none") return ActivationCheckpointing::kNone;
  if (s == "selective") return ActivationCheckpointing::kSelective;
  if (s == "full") return ActivationCheckpointing::kFull;
  throw SpecError("unknown activation checkpointing '" + std::string(s) + "' (expected none, selective or full)");
}

ActivationCheckpointing block_ac(const Policy& policy, int64_t layer) {
  if (policy.ac != ActivationCheckpointing::kSelective || policy.ac_every == 0) return policy.ac;
  return (layer + 1) % policy.ac_every == 0 ? ActivationCheckpointing::kFull : ActivationCheckpointing::kNone;
}

std::string ac_to_string(const Policy& policy) {
  if (policy.ac != ActivationCheckpointing::kSelective) return std::string(name(policy.ac));
  return policy.ac_every == 0 ? "selective:op" : "selective:" + std::to_string(policy.ac_every);
}

void parse_ac(std::string_view s, Policy& policy) {
  constexpr std::string_view kSelective = "selective:";
  if (!s.starts_with(kSelective)) {
    policy.ac = parse_activation_checkpointing(s);
    policy.ac_every = 0;
    return;
  }
  const std::string_view option = s.substr(kSelective.size());
  int64_t k = 0;
  if (option != "op") {
    const auto [end, ec] = std::from_chars(option.data(), option.data() + option.size(), k);
    if (ec != std::errc() || end != option.data() + option.size() || k <= 0) {
      throw SpecError("activation checkpointing '" + std::string(s) +
                      "': expected none, full, selective:op or selective:K with K a positive layer interval");
    }
  }
  policy.ac = ActivationCheckpointing::kSelective;
  policy.ac_every = k;
}

Reshard Reshard::parse(std::string_view s) {
  if (s == "default" || s == "true") return Reshard{Mode::kDefault, 0};
  if (s == "always") return Reshard{Mode::kAlways, 0};
  if (s == "never" || s == "false") return Reshard{Mode::kNever, 0};
  int64_t k = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), k);
  if (ec != std::errc() || end != s.data() + s.size() || k <= 0) {
    throw SpecError(
        "parallelism.fsdp_reshard_after_forward must be default (true), always, never (false) or a positive "
        "group size dividing the shard degree (got '" +
        std::string(s) + "')");
  }
  return Reshard{Mode::kGroup, k};
}

std::string Reshard::to_string() const {
  switch (mode) {
    case Mode::kDefault:
      return "default";
    case Mode::kAlways:
      return "always";
    case Mode::kNever:
      return "never";
    case Mode::kGroup:
      return std::to_string(group);
  }
  return "?";
}

bool Reshard::reshards(int64_t unit, int64_t num_units) const {
  switch (mode) {
    case Mode::kAlways:
      return true;
    case Mode::kNever:
      return false;
    case Mode::kDefault:
    case Mode::kGroup:
      return unit + 1 < num_units;
  }
  return true;
}

int64_t Reshard::backward_group(int64_t shard_degree) const {
  switch (mode) {
    case Mode::kDefault:
    case Mode::kAlways:
      return shard_degree;
    case Mode::kNever:
      return 1;
    case Mode::kGroup:
      return group;
  }
  return shard_degree;
}

std::string_view name(CommPrecision p) { return p == CommPrecision::kMxfp8 ? "mxfp8" : "default"; }

CommPrecision parse_comm_precision(std::string_view s) {
  if (s == "default") return CommPrecision::kDefault;
  if (s == "mxfp8") return CommPrecision::kMxfp8;
  throw SpecError("communication precision '" + std::string(s) + "' is not one of: default, mxfp8");
}

std::string_view name(LossImpl l) { return l == LossImpl::kEager ? "eager" : "fused"; }

LossImpl parse_loss(std::string_view s) {
  if (s == "fused") return LossImpl::kFused;
  if (s == "eager") return LossImpl::kEager;
  throw SpecError("loss '" + std::string(s) +
                  "' is not one of: fused (the runtime's head), eager (PyTorch's cross_entropy)");
}

double wire_element_bytes(CommPrecision p, DataType type) {
  return p == CommPrecision::kMxfp8 ? kMxfp8BytesPerElement : static_cast<double>(element_size(type));
}

void validate(const Policy& p, int64_t shard_degree) {
  if (!is_valid(p.param_dtype) || !is_floating(p.param_dtype)) throw SpecError("policy: param dtype must be floating");
  if (!is_valid(p.reduce_dtype) || !is_floating(p.reduce_dtype))
    throw SpecError("policy: reduce dtype must be floating");
  if (p.prefetch < 0 || p.prefetch > kMaxPrefetch) {
    throw SpecError("policy: prefetch depth is " + std::to_string(p.prefetch) + " (must be 0.." +
                    std::to_string(kMaxPrefetch) + ")");
  }
  if (p.micro_batch <= 0)
    throw SpecError("policy: micro-batch is " + std::to_string(p.micro_batch) + " (must be >= 1)");
  if (p.seq_len <= 0) throw SpecError("policy: sequence length is " + std::to_string(p.seq_len) + " (must be >= 1)");
  if (p.grad_accum <= 0) throw SpecError("policy: gradient accumulation steps must be >= 1");
  // The tokens of a step, counted in int64 by the estimate (and its seq_len^2 attention scores).
  checked_mul(checked_mul(p.seq_len, p.micro_batch, "policy: tokens per micro-batch (seq_len x micro_batch)",
                          p.seq_len >= p.micro_batch ? "seq_len" : "micro_batch"),
              p.grad_accum, "policy: tokens per step (x grad_accum)", "grad_accum");
  if (p.ac_every < 0 || (p.ac_every > 0 && p.ac != ActivationCheckpointing::kSelective)) {
    throw SpecError("policy: activation checkpointing layer interval " + std::to_string(p.ac_every) +
                    " needs selective mode and must be positive");
  }
  check_reshard_group(p.reshard, shard_degree);
}

}  // namespace fsdp::spec
