// The planner's one exception type: bad input (sizes, names, degrees, files) caught before any plan is made.
#pragma once

#include "common/errors.h"

namespace fsdp::spec {

class SpecError : public InputError {
 public:
  using InputError::InputError;
};

// Runs f, turning the InputError of a shared reader (common/toml_util.h) into the planner's SpecError.
template <class F>
auto as_spec_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const SpecError&) {
    throw;
  } catch (const InputError& e) {
    throw SpecError(e.what());
  }
}

}  // namespace fsdp::spec
