// Shared-memory transport between processes on one host.
//
// Control messages travel through one single-producer single-consumer ring per ordered pair of
// ranks in a POSIX shared-memory segment. Payloads up to kShmInlineBytes ride inside the message
// (eager: the send completes at once). Larger payloads wait until the receiver has matched them
// (rendezvous), then move one of two ways:
//   staging: the sender streams them through a ring of 4 shared slots per ordered pair and the
//     receiver copies them out, pipelined piece by piece: two memcpys, the second from cache;
//   cma: the receiver pulls them from the sender's buffer with process_vm_readv straight into the
//     destination: one copy, after the kernel pinned the source pages.
// FSDP_SHM_COPY (rank 0's value holds for the job) picks: auto (default) pulls payloads of at least
// FSDP_SHM_CMA_MIN_BYTES (1 MiB) where the kernel allows it and stages the rest; staging and cma
// force one way. docs/transports.md has the reasoning and the numbers.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transports/transport.h"

namespace fsdp {

inline constexpr size_t kShmInlineBytes = 200;

// Joins the job `job` (a name every rank of one job shares, unique among jobs on the host) as
// `rank` of `size`. Blocks until all ranks attached or `timeout` passed (then throws TimeoutError
// naming the ranks that never came). The segment's name is unlinked once everyone is in, so a crash
// leaves nothing behind in /dev/shm. `job_ranks` (size `size`, or empty: the same numbers) gives the
// job rank of each segment rank when the segment spans one host of a larger job, so that errors name
// job ranks ("process 22940 of rank 3 exited"), never host-local indices.
std::shared_ptr<Transport> make_shm_transport(const std::string& job, int rank, int size,
                                              std::chrono::milliseconds timeout, std::vector<int> job_ranks = {});

}  // namespace fsdp
