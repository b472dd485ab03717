// The one exception the checkpoint layer throws: every message names the checkpoint path, and where it
// applies the file, the parameter and the byte range, so an operator knows which file to look at.
#pragma once

#include <stdexcept>
#include <string>

namespace fsdp::runtime::checkpoint {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fsdp::runtime::checkpoint
