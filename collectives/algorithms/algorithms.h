// Every collective algorithm, one per file. Each is a coroutine over an Op (sends, receives, waits)
// and plain buffers; none knows the transport underneath.
//
// Byte movers take bytes; reducers take a native type (f32, f64 or an integer: the communicator
// widens 16- and 8-bit floats to f32 first) and one of sum, prod, max, min (avg and premul-sum are
// applied around them by the communicator).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "collectives/algorithms/blocks.h"
#include "collectives/core/fingerprint.h"
#include "collectives/core/op.h"
#include "collectives/core/task.h"
#include "collectives/types/collective_kind.h"
#include "collectives/types/gather_run.h"
#include "collectives/types/reduce_op.h"
#include "common/dtype.h"

namespace fsdp {

struct Reduction {
  DataType type;    // native: accumulate_type(type) == type
  ReduceKind kind;  // kSum, kProd, kMax or kMin
  size_t elem() const { return element_size(type); }
};

// Scratch indices, so algorithms that call one another never share a buffer.
enum ScratchSlot : int {
  kScratchPartialA = 0,
  kScratchPartialB = 1,
  kScratchGather = 2,
  kScratchWorkIn = 3,
  kScratchWorkOut = 4,
  kScratchFull = 5,          // the whole reduced buffer of the small-message reduce-scatter
  kScratchHierOwn = 6,       // hierarchical reduce-scatter: this rank's block when the output aliases the input
  kScratchHierAcc = 7,       // ... a rail's packed partial sums
  kScratchHierIncoming = 8,  // ... contributions of the host's other ranks
  kScratchHierRemote = 9,    // ... partials from the other hosts
  kScratchWindowAcc = 10,    // windowed reductions: a chunk's accumulator and a widened input
  kScratchPlaced = 11,       // an all-gather into runs off the windows: the rank-major blocks before placing
};

class HostLayout;
class WindowSync;
class ChunkedCopy;
struct ReductionPlan;

// --- all-gather: `buf` holds every rank's block; this rank's is already in place ---
// O(n) steps, each rank sends and receives (n-1)/n of the buffer: bandwidth-optimal.
Task allgather_ring(Op& op, std::byte* buf, Blocks blocks);
// ceil(log2 n) steps over equal blocks: latency-optimal for small messages.
Task allgather_bruck(Op& op, std::byte* buf, size_t block_bytes);
// Ranks on several hosts: intra-host to rails, rails across hosts, rails to their host (host_layout.h).
Task allgather_hierarchical(Op& op, std::byte* buf, Blocks blocks, const HostLayout& layout);

// --- reduce-scatter: `in` holds the whole input; `out` receives this rank's block (may alias it) ---
// O(n) steps, (n-1)/n of the buffer sent and reduced per rank.
Task reduce_scatter_ring(Op& op, const std::byte* in, std::byte* out, Blocks blocks, Reduction red);
// Small messages: a recursive-doubling all-reduce of the whole buffer (log2 n steps), keeping this
// rank's block of `recv_count` elements.
Task reduce_scatter_recursive_doubling(Op& op, const std::byte* in, std::byte* out, size_t recv_count,
                                       Reduction red);
// Ranks on several hosts: rails sum their host's inputs, swap partials across hosts, hand blocks out.
Task reduce_scatter_hierarchical(Op& op, const std::byte* in, std::byte* out, Blocks blocks, Reduction red,
                                 const HostLayout& layout);

// --- all-reduce: `out` may equal `in` ---
// Reduce-scatter then all-gather around the ring: 2(n-1)/n of the buffer per rank.
Task allreduce_ring(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red);
// log2 steps exchanging the whole buffer; every rank combines in the same tree, so results agree bitwise.
Task allreduce_recursive_doubling(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red);
// Hierarchical reduce-scatter then hierarchical all-gather.
Task allreduce_hierarchical(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red,
                            const HostLayout& layout);

// --- all-to-all: `in` holds one block per destination rank, `out` one block per source rank ---
// n-1 pairwise exchanges, (n-1)/n of the buffer sent and received per rank, nothing forwarded. Blocks
// may differ per rank (all_to_all_v); `send` and `recv` place them in `in` and `out`.
Task alltoall_pairwise(Op& op, const std::byte* in, const PeerBlocks& send, std::byte* out, const PeerBlocks& recv);
// Equal blocks, ceil(log2 n) rounds of about half the buffer each: for small messages.
Task alltoall_bruck(Op& op, const std::byte* in, std::byte* out, size_t block_bytes);

// --- broadcast: `buf` is the root's data on the root and the destination elsewhere ---
// ceil(log2 n) rounds, the whole message each: for small messages.
Task broadcast_binomial(Op& op, std::byte* buf, size_t bytes, int root);
// Scatter from the root, then a ring all-gather: each link carries about the message once.
Task broadcast_scatter_allgather(Op& op, std::byte* buf, size_t bytes, int root);

// --- reduce to `root` (`out` is only written on the root) ---
// Binomial tree, ceil(log2 n) rounds of the whole message: for small messages.
Task reduce_binomial(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red, int root);
// Ring reduce-scatter, then every rank sends its reduced block to the root.
Task reduce_ring(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red, int root);

// --- over shared-memory windows (window_sync.h): every rank's buffers mapped by every other rank ---
// Load/store only: no messages, no staging, no process_vm_readv. They run after sync.agree() found
// every rank's buffers in windows.
// All-gather: copies every peer's block straight from the peer's window ((n-1)/n of the buffer read
// from peers), then waits until the peers read its block. Out of place, this rank's own block is
// copied too, in step with the peers' blocks: `own` holds what is left of that copy (in place, or
// once copied, a finished ChunkedCopy). With `runs` (types/gather_run.h) every block is scattered
// over them instead of landing at recv + p * block_bytes.
Task allgather_window(Op& op, WindowSync& sync, std::byte* recv, size_t block_bytes, std::span<const GatherRun> runs,
                      ChunkedCopy& own);
// Reduce-scatter: reduces this rank's block of `recv_count` user elements straight from every rank's
// input window into `out` (fp32 accumulation for 16/8-bit floats), then waits for the peers' reads.
Task reduce_scatter_window(Op& op, WindowSync& sync, std::byte* out, size_t recv_count, const ReductionPlan& plan);
// All-reduce: the windowed reduce-scatter into this rank's block of the output window, then the
// windowed all-gather of the reduced blocks; every block is reduced once, so ranks agree bitwise.
Task allreduce_window(Op& op, WindowSync& sync, size_t count, const ReductionPlan& plan);
// All-to-all (equal or per-pair blocks): copies each rank's block for this one straight from its
// send window into `out` at recv's offsets, then waits until the peers copied theirs. Only the send
// buffers need be windows.
Task alltoall_window(Op& op, WindowSync& sync, std::byte* out, const PeerBlocks& recv);

// --- barrier: ceil(log2 n) rounds of empty messages ---
Task barrier_dissemination(Op& op);

// --- the fingerprint check (collectives/core/fingerprint.h) ---
// All-gathers every rank's fingerprint (Bruck) and throws MismatchError on the first rank whose
// fingerprint differs from rank 0's. Runs inside the collective's Op (phase 0; the caller starts a new
// phase before the collective itself), so timeouts and peer loss behave as for any collective.
Task exchange_fingerprints(Op& op, Fingerprint mine);

// The registry the communicator selects from and FSDP_ALGO forces: per collective, the
// latency-optimised algorithm first, then the bandwidth-optimal one.
struct AlgorithmInfo {
  CollectiveKind collective;
  std::string_view name;
  std::string_view cost;
  bool small_messages;  // the default below CommOptions::small_message_bytes
};
const std::vector<AlgorithmInfo>& algorithm_registry();

}  // namespace fsdp
