// libFuzzer target: a sharding plan file as `fsdp-train --parallelism.plan_file` reads it
// (runtime/plan_check.h): decode_plan (binary, or text when the first byte is odd), then check_plan
// against debugmodel_byte on 2 ranks in fp32, what the runtime does before it builds anything. Every malformed
// or foreign plan must end in a PlanMismatch naming what differs, never a crash.
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <string>

#include "proto/plan.pb.h"
#include "runtime/plan_check.h"
#include "spec/model_spec.h"

namespace {

// The job the seeds' plan was made for (fuzz/make_seeds.py): debugmodel_byte on 2 ranks in fp32.
const fsdp::spec::ModelSpec& model() {
  static const auto m = fsdp::spec::model_preset("debugmodel_byte");
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // the text parser's complaints would flood the log
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fsdp;
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const proto::ShardingPlan plan = runtime::decode_plan(bytes, data[0] & 1, "plan.pb");
    spec::Policy policy;
    policy.param_dtype = DataType::kFloat32;
    runtime::check_plan(plan, model(), spec::Mesh::for_world(2, 1), policy);
  } catch (const runtime::PlanMismatch&) {
  }
  return 0;
}
