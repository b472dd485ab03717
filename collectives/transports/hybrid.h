// One transport over two: peers on this host through `local` (shared memory), the others through
// `remote` (TCP or UCX). What connect_world builds when a job spans hosts, so ranks that share a
// host never pay the network's cost between themselves.
#pragma once

#include <memory>
#include <vector>

#include "collectives/transports/transport.h"

namespace fsdp {

// host_of_rank[r]: the host of every job rank (equal values share a host). `local` is a transport
// over this host's ranks only, numbered in ascending job-rank order (local index); `remote` spans
// every job rank (only its off-host pairs carry traffic). Requests report job ranks as peers.
std::shared_ptr<Transport> make_hybrid_transport(int rank, const std::vector<int>& host_of_rank,
                                                 std::shared_ptr<Transport> local, std::shared_ptr<Transport> remote);

}  // namespace fsdp
