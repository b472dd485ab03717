// Plans out: protobuf (binary, text, JSON) and the stable human-readable table fsdp-plan prints.
// Everything here is deterministic: the same plan gives the same bytes and the same text.
#pragma once

#include <string>

#include "proto/plan.pb.h"
#include "sharding/auto_planner.h"
#include "sharding/planner.h"

namespace fsdp::sharding {

fsdp::proto::ShardingPlan to_proto(const Plan& plan);
fsdp::proto::AutoPlanReport to_proto(const AutoPlanResult& result);

std::string to_binary(const google::protobuf::Message& message);  // deterministic serialisation
std::string to_text(const google::protobuf::Message& message);
std::string to_json(const google::protobuf::Message& message);                    // fields as in plan.proto, indented
void parse_binary(const std::string& bytes, google::protobuf::Message* message);  // throws spec::SpecError
void parse_text(const std::string& text, google::protobuf::Message* message);     // throws spec::SpecError

// The plan as a table: header, memory per rank, communication per step, time, units (and every
// parameter's layout when per_param).
std::string format_plan(const fsdp::proto::ShardingPlan& plan, bool per_param = false);
// The auto-plan's top candidates and its explanation.
std::string format_candidates(const fsdp::proto::AutoPlanReport& report);

}  // namespace fsdp::sharding
