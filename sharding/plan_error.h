// The planner's one exception type: bad input (sizes, names, degrees, files) caught before any plan is made.
#pragma once

#include <stdexcept>
#include <string>

namespace fsdp::sharding {

class PlanError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace fsdp::sharding
