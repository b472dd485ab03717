// In-process transport: every rank is a thread of one process, so a matched send/receive pair is one
// memcpy from the sender's buffer into the receiver's. The test workhorse: 144 ranks in one process.
#pragma once

#include <memory>
#include <vector>

#include "collectives/transports/transport.h"

namespace fsdp {

// Creates `size` connected endpoints, one per rank.
std::vector<std::shared_ptr<Transport>> make_inproc_transports(int size);

}  // namespace fsdp
