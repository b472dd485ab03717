// The planner's one exception type: bad input (sizes, names, degrees, files) caught before any plan is made.
#pragma once

#include "common/errors.h"

namespace fsdp::sharding {

class PlanError : public InputError {
 public:
  using InputError::InputError;
};

// Runs f, turning the InputError of a shared reader (common/toml_util.h) into the planner's PlanError.
template <class F>
auto as_plan_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const PlanError&) {
    throw;
  } catch (const InputError& e) {
    throw PlanError(e.what());
  }
}

}  // namespace fsdp::sharding
