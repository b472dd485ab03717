// The collectives fsdp-bench measures and what nccl-tests says about each: how a size in bytes maps
// to buffers, which element count the API call takes, where an in-place call keeps its data, and the
// factor that turns algorithm bandwidth into bus bandwidth.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::bench {

enum class Collective { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kReduce, kSendRecv, kAllToAll };

std::string_view name(Collective c);
std::optional<Collective> parse_collective(std::string_view s);
const std::vector<Collective>& all_collectives();

bool has_reduction(Collective c);
bool has_root(Collective c);
// sendrecv and alltoall have no in-place form here (their in-place columns print N/A).
bool has_in_place(Collective c);

// nccl-tests' bus bandwidth factor: busbw = algbw * factor. All-gather, reduce-scatter and alltoall
// (n-1)/n; all-reduce 2(n-1)/n; broadcast, reduce and sendrecv 1.
double bus_factor(Collective c, int nranks);

// One row's buffers, nccl-tests style. `count` is the row's element count (size / element size,
// rounded down to a multiple of n where blocks must be equal); the API call takes `param_count`.
struct Geometry {
  size_t count = 0;        // elements printed in the "count" column
  size_t param_count = 0;  // what the call takes: per-rank block for all-gather/reduce-scatter/alltoall
  size_t send_count = 0;   // elements of the send buffer
  size_t recv_count = 0;   // elements of the receive buffer
  // In place: the send data starts this many elements into the receive buffer (all-gather: the
  // rank's block), or the receive data starts this far into the send buffer (reduce-scatter).
  size_t in_place_offset = 0;
  bool in_place_in_recv = true;  // all-gather style (send inside recv) vs reduce-scatter (recv inside send)
};

Geometry geometry(Collective c, size_t bytes, size_t elem, int nranks, int rank);

}  // namespace fsdp::bench
