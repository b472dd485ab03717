// The two exceptions of bad input that every layer shares. Layers derive their own from them
// (spec::SpecError, train::ConfigError) so callers can catch a layer's errors or all of them.
#pragma once

#include <stdexcept>

namespace fsdp {

// Bad arguments to a call, caught before anything was done (nothing was sent, nothing allocated).
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Bad input from a file, a key or a flag; the message names where ("job.toml:12: training.steps: ...").
class InputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace fsdp
