// The coroutine each collective runs on the engine: the windowed path where every rank's buffers are
// windows, else the algorithm the communicator chose (hierarchical where `layout` is set, the
// latency-optimised one where `small`, the bandwidth-optimal one otherwise; algorithms.h). The
// communicator checks the arguments and picks; these only run what was picked.
#pragma once

#include <cstddef>
#include <memory>
#include <memory_resource>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/host_layout.h"
#include "collectives/algorithms/reduction_plan.h"
#include "collectives/algorithms/window_sync.h"
#include "collectives/flag_path.h"

namespace fsdp {

// recv holds size() blocks of block_bytes; send is this rank's block (may be its place in recv). With
// `runs` (types/gather_run.h; kept here, in the operation's arena) the blocks land over them instead.
Task run_all_gather(Op& op, const void* send, std::byte* recv, size_t block_bytes, bool small,
                    std::shared_ptr<const HostLayout> layout, WindowPlan windows,
                    std::pmr::vector<GatherRun> runs = {});
Task run_reduce_scatter(Op& op, ReductionPlan plan, const void* send, void* recv, size_t recv_count, bool small,
                        std::shared_ptr<const HostLayout> layout, WindowPlan windows);
Task run_all_reduce(Op& op, ReductionPlan plan, const void* send, void* recv, size_t count, bool small,
                    std::shared_ptr<const HostLayout> layout, WindowPlan windows);
Task run_reduce(Op& op, ReductionPlan plan, const void* send, void* recv, size_t count, int root, bool small);
Task run_broadcast(Op& op, const void* send, std::byte* recv, size_t bytes, int root, bool small);
Task run_send(Op& op, const void* buf, size_t bytes, int peer);
Task run_recv(Op& op, void* buf, size_t bytes, int peer);
// Over windows where every rank's send buffer is one (windows.table set: this communicator shares
// windows); `windows` gets the blocks here, where they live as long as the operation. `small_equal`:
// equal blocks small enough for Bruck.
Task run_all_to_all_v(Op& op, const void* send, PeerBlocks send_blocks, void* recv, PeerBlocks recv_blocks,
                      WindowPlan windows, bool small_equal = false);
Task run_all_to_all(Op& op, const void* send, void* recv, size_t block_bytes, bool small, WindowPlan windows);
Task run_barrier(Op& op);
// An MXFP8 reduce-scatter: its exchange of wire slots (an all-to-all), then the f32 sums of the
// decoded contributions (mx::finish_reduce_scatter's arguments, collectives/quantized.h).
struct Mxfp8Sums {
  const uint8_t* recv_wire;
  const void* own;
  DataType type;
  size_t recv_count;
  int rank;
  int ranks;
  DataType element;
  float* out;
  bool average;
};
Task run_then_sum_mxfp8(Op& op, Task exchange, Mxfp8Sums sums);
// The collective behind a fingerprint check: every rank agrees on what it is about to run first.
Task run_checked(Op& op, Fingerprint mine, Task collective);
// The collective after every peer made its call at this sequence number (its slot of `parity` in the
// flag segment: mark or post): MismatchError naming both calls where one differs from `mine` (a
// peer on the flag path, or another collective or count), at once instead of at the timeout.
Task run_after_peer_calls(Op& op, std::shared_ptr<const FlagSegment> flags, uint64_t parity, Fingerprint mine,
                          Task collective);

}  // namespace fsdp
