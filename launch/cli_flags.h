// The launch flags every fsdp program takes (fsdp-train, fsdp-bench): --rank, --world-size,
// --local-rank, --local-world-size, --master-addr, --master-port and --transport. They override what
// the environment says (bootstrap.h, precedence 1), so one process can be started by hand without a
// launcher. Each takes `--flag VALUE` or `--flag=VALUE`.
#pragma once

#include <string>
#include <vector>

#include "launch/bootstrap.h"

namespace fsdp::launch {

struct LaunchFlags {
  BootstrapOverrides overrides;
  std::string transport;  // empty: not given (FSDP_TRANSPORT or auto decide)
};

// Removes the launch flags from `args` (argv without the program name) and returns them; every other
// argument stays in order. Throws fsdp::InvalidArgument naming the flag for a missing or malformed value.
LaunchFlags take_launch_flags(std::vector<std::string>& args);

// One line per flag, for a program's --help.
std::string launch_flags_usage();

}  // namespace fsdp::launch
