#include "runtime/plan_check.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "proto/plan.pb.h"
#include "sharding/chip_profile.h"
#include "sharding/plan_io.h"
#include "sharding/planner.h"
#include "spec/spec_error.h"

namespace fsdp::runtime {
namespace {

std::string shape_text(const google::protobuf::RepeatedField<int64_t>& shape) {
  std::string s = "[";
  for (int i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Collects "<where>: <what> <plan value> in the plan, <value> in this job" lines.
class Differences {
 public:
  template <typename T>
  void field(const std::string& where, const char* what, const T& in_plan, const T& in_model) {
    if (in_plan == in_model) return;
    std::ostringstream s;
    s << where << ": " << what << " " << in_plan << " in the plan, " << in_model << " in this job";
    lines_.push_back(s.str());
  }
  std::vector<std::string> take() { return std::move(lines_); }

 private:
  std::vector<std::string> lines_;
};

void compare_units(const proto::ShardingPlan& got, const proto::ShardingPlan& want, Differences& d) {
  if (got.units_size() != want.units_size()) {
    d.field<int>("model", "units:", got.units_size(), want.units_size());
  }
  const int units = std::min(got.units_size(), want.units_size());
  for (int u = 0; u < units; ++u) {
    const auto& g = got.units(u);
    const auto& w = want.units(u);
    const std::string where = "unit " + std::to_string(u) + " (" + w.name() + ")";
    if (g.name() != w.name()) {
      d.field(where, "name", g.name(), w.name());
      continue;  // a different unit: its parameters would all differ too
    }
    d.field(where, "chunk elements", g.chunk_numel(), w.chunk_numel());
    if (g.params_size() != w.params_size()) d.field<int>(where, "parameters:", g.params_size(), w.params_size());
    const int params = std::min(g.params_size(), w.params_size());
    for (int p = 0; p < params; ++p) {
      const auto& gp = g.params(p);
      const auto& wp = w.params(p);
      const std::string at = where + ": parameter " + std::to_string(p) + " (" + wp.name() + ")";
      if (gp.name() != wp.name()) {
        d.field(at, "name", gp.name(), wp.name());
        continue;
      }
      d.field(at, "shape", shape_text(gp.shape()), shape_text(wp.shape()));
      d.field(at, "dtype", gp.dtype(), wp.dtype());
      d.field(at, "rows per rank", gp.rows_per_rank(), wp.rows_per_rank());
      d.field(at, "offset in chunk", gp.offset_in_chunk(), wp.offset_in_chunk());
    }
  }
}

// A plan's reshard_after_forward as this build names it; unreadable text stays as it is (and differs).
std::string canonical_reshard(const std::string& text) {
  try {
    return spec::Reshard::parse(text).to_string();
  } catch (const spec::SpecError&) {
    return text;
  }
}

// A plan's activation checkpointing as this build names it ("selective" is "selective:op"); unreadable
// text stays as it is (and differs).
std::string canonical_ac(const std::string& text) {
  try {
    spec::Policy p;
    spec::parse_ac(text, p);
    return spec::ac_to_string(p);
  } catch (const spec::SpecError&) {
    return text;
  }
}

}  // namespace

std::vector<std::string> plan_mismatches(const proto::ShardingPlan& plan, const spec::ModelSpec& model,
                                         const spec::Mesh& mesh, const spec::Policy& policy) {
  // What the planner itself says for this model, mesh and policy: the plan must be that layout.
  const proto::ShardingPlan want =
      sharding::to_proto(sharding::make_plan(model, sharding::chip_preset("cpu"), mesh, policy, 0.0));
  Differences d;
  d.field("mesh", "world size", plan.mesh().world_size(), want.mesh().world_size());
  d.field("mesh", "shard degree", plan.mesh().shard_degree(), want.mesh().shard_degree());
  d.field("mesh", "replicate degree", plan.mesh().replicate_degree(), want.mesh().replicate_degree());
  // Plans written before expert parallelism existed carry 0: no expert parallelism.
  d.field("mesh", "parallelism.expert_parallel_degree", std::max<int64_t>(1, plan.mesh().expert_parallel_degree()),
          want.mesh().expert_parallel_degree());
  d.field("policy", "param dtype", plan.policy().param_dtype(), want.policy().param_dtype());
  d.field("policy", "reduce dtype", plan.policy().reduce_dtype(), want.policy().reduce_dtype());
  // Compared as policies, so a plan written with FSDP2's "true"/"false" matches "default"/"never".
  d.field("policy", "reshard_after_forward", canonical_reshard(plan.policy().reshard_after_forward()),
          want.policy().reshard_after_forward());
  d.field("policy", "prefetch", plan.policy().prefetch_depth(), want.policy().prefetch_depth());
  d.field("policy", "activation checkpointing", canonical_ac(plan.policy().activation_checkpointing()),
          want.policy().activation_checkpointing());
  // Plans written before MXFP8 communication existed carry "": the default.
  auto comm = [](const std::string& s) { return s.empty() ? std::string("default") : s; };
  d.field("policy", "training.param_comm_dtype", comm(plan.policy().param_comm()), want.policy().param_comm());
  d.field("policy", "training.grad_comm_dtype", comm(plan.policy().grad_comm()), want.policy().grad_comm());
  compare_units(plan, want, d);
  return d.take();
}

void check_plan(const proto::ShardingPlan& plan, const spec::ModelSpec& model, const spec::Mesh& mesh,
                const spec::Policy& policy) {
  const auto diffs = plan_mismatches(plan, model, mesh, policy);
  if (diffs.empty()) return;
  constexpr size_t kShown = 8;
  std::string what = "the sharding plan (model '" + plan.model() + "') does not match model '" + model.name +
                     "' in this job: ";
  for (size_t i = 0; i < diffs.size() && i < kShown; ++i) what += (i ? "; " : "") + diffs[i];
  if (diffs.size() > kShown) what += "; and " + std::to_string(diffs.size() - kShown) + " more";
  throw PlanMismatch(what);
}

proto::ShardingPlan decode_plan(const std::string& bytes, bool text, const std::string& path) {
  proto::ShardingPlan plan;
  try {
    if (text) {
      sharding::parse_text(bytes, &plan);
    } else {
      sharding::parse_binary(bytes, &plan);
    }
  } catch (const std::exception& e) {
    throw PlanMismatch("plan file '" + path + "': " + e.what());
  }
  return plan;
}

proto::ShardingPlan read_plan_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PlanMismatch("cannot read plan file '" + path + "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return decode_plan(bytes.str(), path.ends_with(".txtpb") || path.ends_with(".pbtxt"), path);
}

}  // namespace fsdp::runtime
