// Internal: the public header with its functions made visible (everything else in libfsdp_nccl is
// hidden: -fvisibility=hidden plus exports.map), so every nccl/*.cc includes nccl.h through here.
#pragma once

#pragma GCC visibility push(default)
#include "nccl.h"
#pragma GCC visibility pop
