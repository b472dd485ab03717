// The collectives API: a group of ranks over a transport, running all-gather, reduce-scatter,
// all-reduce, broadcast, reduce, all-to-all (equal or per-pair counts), barrier and send/recv
// asynchronously on a progress engine.
//
//   auto comm = Communicator::create(transport);
//   Work w = comm->all_gather(shard, full, shard_count, DataType::kBfloat16);
//   ... compute ...
//   w.wait();
//
// Every rank must call the collectives of a communicator in the same order with matching arguments.
// Collectives of one communicator run in call order; different communicators (e.g. from split) run
// concurrently. Buffers must stay valid until the Work completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/core/options.h"
#include "collectives/kernels/mxfp8.h"
#include "collectives/types/collective_kind.h"
#include "collectives/types/errors.h"
#include "collectives/types/gather_run.h"
#include "collectives/types/reduce_op.h"
#include "collectives/window.h"
#include "collectives/work.h"
#include "common/dtype.h"
#include "common/memory_tracker.h"

namespace fsdp {

// How a collective's data travel between ranks: as the buffers' type (native), or as MXFP8 blocks
// (collectives/kernels/mxfp8.h, collectives/quantized.h: 8.25 bits per element; sums stay f32).
enum class WirePrecision { kNative, kMxfp8 };
struct Wire {
  WirePrecision precision = WirePrecision::kNative;
  mx::Format format{};          // kMxfp8: element format and scale rounding
  uint8_t* scratch = nullptr;   // kMxfp8 reduce-scatter: the caller's memory for 2 * size() wire slots
  static Wire mxfp8(mx::Format f, uint8_t* scratch = nullptr) { return {WirePrecision::kMxfp8, f, scratch}; }
};

class Transport;
class Mapping;

// The ranks of a communicator of `size` ranks left after excluding `excluded`, in order: what
// Communicator::shrink makes. Throws InvalidArgument naming the offending entry for a rank out of
// [0, size), a duplicate, a set that excludes every rank, or one that excludes `self`.
std::vector<int> shrink_survivors(int size, int self, std::span<const int> excluded);
class ProgressEngine;
class ScratchPool;
struct GroupView;

class Communicator {
 public:
  // A communicator over every endpoint of `transport`'s job. Ranks of an in-process job may share
  // one engine; null creates one. `context` tells apart independent communicators on one transport.
  static std::unique_ptr<Communicator> create(std::shared_ptr<Transport> transport,
                                              CommOptions options = CommOptions::from_env(),
                                              std::shared_ptr<ProgressEngine> engine = nullptr, uint64_t context = 1);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // This communicator's rank r as an endpoint of the transport (the job-wide rank).
  int global_rank(int r) const;
  const CommOptions& options() const { return options_; }

  // recv holds size() blocks of `count` elements; in place when send is this rank's block of recv.
  Work all_gather(const void* send, void* recv, size_t count, DataType type);
  // The same with the blocks laid out by `runs` instead of rank-major (types/gather_run.h: FSDP's copy-out
  // done in the gather's own pass); recv is written only where a run's piece lands, and send must not
  // overlap those bytes. The exchange is the plain all-gather's, but this form never takes the flag path
  // (collectives/flag_path.h) the plain one takes for small messages: every rank calls the same form.
  // `runs` may be freed once this returns.
  Work all_gather_into_runs(const void* send, void* recv, size_t count, DataType type, std::span<const GatherRun> runs);
  // send holds size() blocks of `recv_count`; in place when recv is this rank's block of send.
  Work reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op);
  // The same with the wire precision chosen; Wire{} is the calls above. With MXFP8 (type kFloat32 or
  // kBfloat16):
  // - all_gather: recv holds size() wire slots of mx::slot_bytes(count) bytes, which the caller
  //   decodes (mx::decode_gathered); send's `count` elements are quantised into this rank's slot at
  //   the call, or, in place (send is that slot), the slot already holds them quantised (quantise once,
  //   gather many times).
  // - reduce_scatter: every other rank's chunk of send travels quantised through wire.scratch
  //   (2 * size() slots: the outgoing chunks, then the incoming ones), this rank's own stays exact;
  //   recv gets `recv_count` f32 sums (own chunk, then the decoded contributions in rank order), op
  //   sum or avg; recv may be this rank's chunk of a kFloat32 send.
  Work all_gather(const void* send, void* recv, size_t count, DataType type, const Wire& wire);
  Work reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op, const Wire& wire);
  // In place when send == recv.
  Work all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op);
  // The root sends `send`; every rank (root included) receives into `recv` (send == recv is fine).
  Work broadcast(const void* send, void* recv, size_t count, DataType type, int root);
  // Only the root's `recv` is written (it may be null elsewhere).
  Work reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root);
  // send holds size() blocks of `count`, block j for rank j; recv gets size() blocks, block j from
  // rank j. send and recv must not overlap.
  Work all_to_all(const void* send, void* recv, size_t count, DataType type);
  // Blocks of any size per pair, as MPI_Alltoallv (MoE token dispatch); counts and displacements in
  // elements, size() of each: send_counts[j] elements at send + send_displs[j] go to rank j, and
  // recv_counts[i] elements from rank i land at recv + recv_displs[i]. The spans may be freed once the
  // call returns. Rank i's send_counts[j] must equal rank j's recv_counts[i]: where they differ both
  // ranks fail with CommError ("message size mismatch", naming both ranks and sizes) and nothing is
  // written past a block. Receive blocks must not overlap each other nor the send blocks.
  Work all_to_all_v(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                    void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                    DataType type);
  Work barrier();
  // Point-to-point, matched in call order per pair of ranks; they start at once, not behind
  // collectives, so a send and a receive posted back to back cannot deadlock.
  Work send(const void* buf, size_t count, DataType type, int peer);
  Work recv(void* buf, size_t count, DataType type, int peer);

  // Collective (every rank, same order): `bytes` of memory that every rank of this communicator maps
  // (collectives/window.h), counted against `tracker` while alive. All-gathers, reduce-scatters and
  // all-reduces whose buffers lie in windows on every rank then run by loads and stores between the
  // mapped buffers; where some rank's buffer is not in a window, all ranks take the usual path. Where
  // the ranks cannot share memory (several hosts, a network transport, ptrace forbidden) the window
  // is plain memory of this rank (Window::shared() false, and why). Existing user memory cannot be
  // registered: private anonymous pages (malloc, new) have no file another process could map, so
  // buffers that should be windows must be allocated here. Throws CommError where a rank could not
  // allocate (naming it).
  Window alloc_window(size_t bytes, MemoryTracker* tracker = nullptr, MemoryCategory category = MemoryCategory::kOther);
  // Collective, as alloc_window, over memory the caller mapped MAP_SHARED from a memfd it keeps open
  // (ncclMemAlloc's): [data, data + bytes) lies at byte `offset` of the `file_bytes`-byte file `fd`.
  // The Window shares it without owning it (destroying the Window ends the sharing; the caller frees
  // the memory after). fd -1 (no such memory on this rank) fails every rank with CommError naming it.
  Window share_window(void* data, size_t bytes, int fd, size_t offset, size_t file_bytes);
  // How many collectives of this communicator ran on the flag path so far (tests, fsdp-bench).
  uint64_t flag_path_collectives() const;
  // How many collectives of this communicator ran over windows so far (tests, fsdp-bench -R).
  uint64_t windowed_collectives() const;

  // Collective: ranks passing the same color form a new communicator, ordered by (key, rank).
  // A negative color takes part but gets null back. The host layout carries over to the members.
  std::unique_ptr<Communicator> split(int color, int key);

  // Local, with no message sent: the ranks not in `excluded` (ranks of this communicator: distinct, in
  // range, not this rank, not all of them) form a new communicator, renumbered in rank order, over the
  // same transport. Every survivor passes the same set at its k-th shrink of this communicator; the
  // excluded ranks do not call it and nothing waits on them (they may be dead), and a lost excluded
  // peer fails only what includes it. Throws InvalidArgument (shrink_survivors) for a bad set.
  std::unique_ptr<Communicator> shrink(std::span<const int> excluded);

  // A peer of this communicator the transport finds gone (its process exited, its connection closed,
  // or the heartbeat declared it lost), polled now, so a lost peer shows while no operation waits on it.
  struct LostPeer {
    int rank;  // in this communicator
    std::string why;
  };
  std::optional<LostPeer> lost_peer();

  // Which host each rank is on (any label per rank; equal labels share a host), as the launcher
  // measured it. Every rank must pass the same layout before the collectives that should use it.
  // With ranks on several hosts, large all-gathers, reduce-scatters and all-reduces run hierarchically
  // (intra-host phases, then 1/L of the buffer per rank across hosts; FSDP_ALGO=...=ring forces flat).
  void set_host_layout(const std::vector<int>& host_of_rank);
  int host_count() const;   // 1 until a layout was set
  int local_rank() const;   // this rank's index among the ranks of its host
  int local_size() const;   // ranks on this rank's host
  int host_of(int r) const;  // host index (hosts numbered by their lowest rank) of rank r

  // The algorithm a collective of `bytes` in all would run with now (FSDP_ALGO, message size and host
  // layout considered), e.g. "ring", "bruck", "hierarchical".
  std::string algorithm_for(CollectiveKind collective, size_t bytes) const;

  // Fails everything in flight with AbortedError and breaks the communicator; safe after errors.
  void abort(const std::string& why = "aborted by the caller");

 private:
  struct Impl;
  Communicator(std::shared_ptr<Transport> transport, CommOptions options, std::shared_ptr<ProgressEngine> engine,
               uint64_t context, std::vector<int> endpoints, int rank);
  // all_gather's operation once the arguments are checked: rank-major (runs empty) or into runs.
  Work submit_all_gather(const void* send, void* recv, size_t count, DataType type, std::span<const GatherRun> runs);
  // The MXFP8 halves of all_gather / reduce_scatter (communicator_mxfp8.cc).
  Work all_gather_mxfp8(const void* send, void* recv, size_t count, DataType type, const Wire& wire);
  Work reduce_scatter_mxfp8(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                            const Wire& wire);
  // alloc_window and share_window: `owned` holds the memory when the window owns it; `error` says why
  // this rank has none (fd -1).
  Window make_window(Mapping owned, std::byte* data, size_t bytes, int fd, size_t offset, size_t file_bytes,
                     const std::string& error);

  CommOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp
