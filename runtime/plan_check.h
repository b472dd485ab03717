// Checks that a sharding plan (from the planner, or a file written by `fsdp-plan --out`) describes the
// model and the layout this runtime is about to build: the plan decides how every tensor is sharded,
// so a plan for another model, another mesh or another policy must be refused, naming each difference,
// before any buffer is allocated.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/mesh.h"
#include "spec/model_spec.h"
#include "spec/policy.h"

namespace fsdp::proto {
class ShardingPlan;
}

namespace fsdp::runtime {

class PlanMismatch : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Every way `plan` differs from the layout of `model` over `mesh` (its expert-parallel degree included:
// under expert parallelism the plan's units are EP rank 0's, the same sizes on every EP rank) with
// `policy` (dtypes, reshard_after_forward, prefetch), one line each, e.g.
// "unit 2 (layers.1): parameter 0 (layers.1.attention.wq.weight): shape [64, 64] in the plan, [128, 128] in
// this job". Empty when they agree.
std::vector<std::string> plan_mismatches(const proto::ShardingPlan& plan, const spec::ModelSpec& model,
                                         const spec::Mesh& mesh, const spec::Policy& policy);

// Throws PlanMismatch listing plan_mismatches() (the first few, and how many more) when there are any.
void check_plan(const proto::ShardingPlan& plan, const spec::ModelSpec& model, const spec::Mesh& mesh,
                const spec::Policy& policy);

// Reads a plan written by `fsdp-plan --out`: text format when the name ends in .txtpb or .pbtxt, else
// binary. Throws PlanMismatch naming the file when it cannot be read or parsed.
proto::ShardingPlan read_plan_file(const std::string& path);

// The file's bytes as a plan (what read_plan_file does once it has read them; the fuzz target
// fuzz/plan_file.cc calls it directly). `text`: protobuf text format, else binary. Throws
// PlanMismatch naming `path` when they do not parse.
proto::ShardingPlan decode_plan(const std::string& bytes, bool text, const std::string& path);

}  // namespace fsdp::runtime
