#include "collectives/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/host_layout.h"
#include "collectives/algorithms/reduction_plan.h"
#include "collectives/algorithms/selection.h"
#include "collectives/algorithms/window_sync.h"
#include "collectives/core/fingerprint.h"
#include "collectives/core/flag_path.h"
#include "collectives/core/flight_recorder.h"
#include "collectives/core/op.h"
#include "collectives/core/op_pool.h"
#include "collectives/core/progress_engine.h"
#include "collectives/core/window_table.h"
#include "collectives/transports/transport.h"
#include "collectives/types/reduce_kernels.h"
#include "collectives/types/stream_copy.h"
#include "common/splitmix.h"

namespace fsdp {
namespace {

constexpr uint64_t kPointToPointBit = 1ull << 63;

uint64_t mix(uint64_t x) { return splitmix64(x) & ~kPointToPointBit; }  // spreads a child context over 64 bits

// The large-message algorithm the caller picked: the flat ring (layout null) or the hierarchical one.
Task run_all_gather(Op& op, const void* send, std::byte* recv, size_t block_bytes, bool small,
                    std::shared_ptr<const HostLayout> layout, WindowPlan windows) {
  std::byte* mine = recv + op.rank() * block_bytes;
  if (windows.table) {
    // Out of place, the own block's copy fills the wait for the peers' posts; the rest runs in step
    // with the peers' blocks (allgather_window.cc).
    ChunkedCopy own;
    if (send != mine) own = ChunkedCopy(mine, static_cast<const std::byte*>(send), block_bytes);
    WindowSync sync(op, std::move(windows));
    sync.post();
    while (!own.finished() && !sync.peers_posted()) own.copy_through(own.copied() + kWindowCopyChunkBytes);
    co_await sync.agree();
    if (sync.windowed()) {
      co_await allgather_window(op, sync, recv, block_bytes, own);
      co_return;
    }
    // Not every rank's buffers are windows: the rest of the own block in cache for the ring or Bruck.
    if (send != mine) {
      copy_bytes(mine + own.copied(), static_cast<const std::byte*>(send) + own.copied(), block_bytes - own.copied());
    }
  } else if (send != mine) {
    copy_bytes(mine, send, block_bytes);  // the ring and Bruck read it back at once: keep it in cache
  }
  if (layout) {
    co_await allgather_hierarchical(op, recv, Blocks{block_bytes * op.size(), op.size(), 1}, *layout);
  } else if (small) {
    co_await allgather_bruck(op, recv, block_bytes);
  } else {
    co_await allgather_ring(op, recv, Blocks{block_bytes * op.size(), op.size(), 1});
  }
}

Task run_reduce_scatter(Op& op, ReductionPlan plan, const void* send, void* recv, size_t recv_count, bool small,
                        std::shared_ptr<const HostLayout> layout, WindowPlan windows) {
  const int n = op.size();
  if (windows.table) {
    WindowSync sync(op, std::move(windows));
    co_await sync.agree();
    if (sync.windowed()) {
      co_await reduce_scatter_window(op, sync, static_cast<std::byte*>(recv), recv_count, plan);
      co_return;
    }
  }
  const size_t total = recv_count * n;
  const std::byte* in = plan.input(op, send, total);
  std::byte* out = plan.output(op, recv, recv_count);
  // A widened or pre-multiplied input lives in scratch, so the user's in-place output no longer aliases it.
  if (layout) {
    co_await reduce_scatter_hierarchical(op, in, out, Blocks{total, n, plan.red.elem()}, plan.red, *layout);
  } else if (small) {
    co_await reduce_scatter_recursive_doubling(op, in, out, recv_count, plan.red);
  } else {
    co_await reduce_scatter_ring(op, in, out, Blocks{total, n, plan.red.elem()}, plan.red);
  }
  plan.finish(out, recv, recv_count, n);
}

Task run_all_reduce(Op& op, ReductionPlan plan, const void* send, void* recv, size_t count, bool small,
                    std::shared_ptr<const HostLayout> layout, WindowPlan windows) {
  if (windows.table) {
    WindowSync sync(op, std::move(windows));
    co_await sync.agree();
    if (sync.windowed()) {
      co_await allreduce_window(op, sync, count, plan);
      co_return;
    }
  }
  const std::byte* in = plan.input(op, send, count);
  std::byte* out = plan.output(op, recv, count);
  if (layout) {
    co_await allreduce_hierarchical(op, in, out, count, plan.red, *layout);
  } else if (small) {
    co_await allreduce_recursive_doubling(op, in, out, count, plan.red);
  } else {
    co_await allreduce_ring(op, in, out, count, plan.red);
  }
  plan.finish(out, recv, count, op.size());
}

Task run_reduce(Op& op, ReductionPlan plan, const void* send, void* recv, size_t count, int root, bool small) {
  const std::byte* in = plan.input(op, send, count);
  const bool is_root = op.rank() == root;
  // Non-roots need a full-size target for the ring's reduce-scatter layout only on the root side.
  std::byte* out = is_root ? plan.output(op, recv, count) : nullptr;
  if (small) {
    co_await reduce_binomial(op, in, out, count, plan.red, root);
  } else {
    co_await reduce_ring(op, in, out, count, plan.red, root);
  }
  if (is_root) plan.finish(out, recv, count, op.size());
}

Task run_broadcast(Op& op, const void* send, std::byte* recv, size_t bytes, int root, bool small) {
  if (op.rank() == root && send != recv && bytes > 0) copy_bytes(recv, send, bytes);
  if (small) {
    co_await broadcast_binomial(op, recv, bytes, root);
  } else {
    co_await broadcast_scatter_allgather(op, recv, bytes, root);
  }
}

Task run_send(Op& op, const void* buf, size_t bytes, int peer) {
  co_await op.wait(op.send(peer, 0, buf, bytes));
}

Task run_recv(Op& op, void* buf, size_t bytes, int peer) {
  co_await op.wait(op.recv(peer, 0, buf, bytes));
}

// Over windows where every rank's send buffer is one (windows.table set: this communicator shares
// windows); `windows` gets the blocks here, where they live as long as the operation.
Task run_all_to_all_v(Op& op, const void* send, PeerBlocks send_blocks, void* recv, PeerBlocks recv_blocks,
                      WindowPlan windows, bool small_equal = false) {
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (windows.table) {
    windows.send_blocks = &send_blocks;
    windows.recv_blocks = &recv_blocks;
    WindowSync sync(op, std::move(windows));
    co_await sync.agree();
    if (sync.windowed()) {
      co_await alltoall_window(op, sync, out, recv_blocks);
      co_return;
    }
  }
  if (small_equal) {
    co_await alltoall_bruck(op, in, out, send_blocks.bytes.empty() ? 0 : send_blocks.bytes[0]);
  } else {
    co_await alltoall_pairwise(op, in, send_blocks, out, recv_blocks);
  }
}

Task run_all_to_all(Op& op, const void* send, void* recv, size_t block_bytes, bool small, WindowPlan windows) {
  PeerBlocks send_blocks = PeerBlocks::equal(op.size(), block_bytes, &op.arena());
  PeerBlocks recv_blocks = PeerBlocks::equal(op.size(), block_bytes, &op.arena());
  co_await run_all_to_all_v(op, send, std::move(send_blocks), recv, std::move(recv_blocks), std::move(windows), small);
}

Task run_barrier(Op& op) { co_await barrier_dissemination(op); }

// The collective behind a fingerprint check: every rank agrees on what it is about to run first.
Task run_checked(Op& op, Fingerprint mine, Task collective) {
  co_await exchange_fingerprints(op, mine);
  op.next_phase();
  co_await collective;
}

}  // namespace

struct Communicator::Impl {
  std::shared_ptr<Transport> transport;
  std::shared_ptr<ProgressEngine> engine;
  GroupView group;
  GroupView p2p_group;  // same ranks, its own tag context; its sequence numbers count per peer
  ScratchPool scratch;
  std::shared_ptr<OpPool> ops;  // reused from call to call
  ProgressEngine::Stream* stream = nullptr;
  AlgorithmChoice algorithms;
  uint64_t next_seq = 0;
  std::vector<uint64_t> sends_to;     // per peer, for matching point-to-point in call order
  std::vector<uint64_t> recvs_from;
  std::shared_ptr<const HostLayout> layout;  // null: every rank on one host (or not told)
  std::shared_ptr<WindowTable> windows;      // null until the first alloc_window
  OpPtr last_ordered;                        // the last collective given to the engine

  // The flag path (collectives/core/flag_path.h), set up by the first collective small enough for it.
  enum class FlagSetup { kUntried, kSettingUp, kOn, kOff };
  FlagSetup flag_setup = FlagSetup::kUntried;
  std::shared_ptr<FlagSegment> flags;
  std::shared_ptr<FlagOp> flag_pool[2];  // by parity
  std::shared_ptr<FlagOp> flag_pending;  // the flag operation not yet known to be complete
  uint64_t flag_ops = 0;

  // Where this rank's buffers of a collective lie in shared windows. Empty (no window exchange at
  // all) unless this communicator shares windows, which every rank knows alike (alloc_window is
  // collective); a count-0 or single-rank collective never needs one.
  WindowPlan window_plan(const void* read, size_t read_bytes, const void* fallback_read = nullptr,
                         const void* result = nullptr, size_t result_bytes = 0, bool needs_result = false) const {
    if (!windows || group.endpoints.size() < 2 || read_bytes == 0 || !windows->control()) return {};
    WindowPlan p{windows, windows->find(read, read_bytes), read_bytes, {}, result_bytes, needs_result};
    if (!p.read.windowed() && fallback_read) p.read = windows->find(fallback_read, read_bytes);
    if (needs_result) p.result = windows->find(result, result_bytes);
    return p;
  }
  // all_to_all(_v): the send buffer's extent may be 0 on some ranks and not others, so unlike
  // window_plan the decision to exchange posts cannot hang on it (every rank must decide alike).
  WindowPlan window_plan_all_to_all(const void* send, size_t extent) const {
    if (!windows || group.endpoints.size() < 2 || !windows->control()) return {};
    return WindowPlan{windows, send ? windows->find(send, extent) : WindowRef{}, extent};
  }

  // The layout when the hierarchical algorithm should run this collective, else null (the coroutine
  // holds a reference, so a later set_host_layout cannot pull it from under an operation in flight).
  std::shared_ptr<const HostLayout> hierarchy(const char* collective, size_t bytes, const CommOptions& o) const {
    const bool multi_host = layout && layout->hosts() > 1;
    if (!algorithms.hierarchical(collective, bytes, o.small_message_bytes, multi_host)) return nullptr;
    return layout ? layout : std::make_shared<const HostLayout>(std::vector<int>(group.endpoints.size(), 0));
  }

  Impl(std::shared_ptr<Transport> t, std::shared_ptr<ProgressEngine> e, const CommOptions& o)
      : transport(std::move(t)), engine(std::move(e)), ops(OpPool::create(*transport, scratch)), algorithms(o.algorithms) {}

  // A communicator has one flag operation outstanding at most, and it completes before the next
  // collective is given to the engine or posted: errors stay with its own Work (and break the
  // communicator, so what follows fails at once).
  void settle_flag_op() {
    if (!flag_pending) return;
    std::shared_ptr<FlagOp> pending = std::move(flag_pending);
    if (pending->settled()) return;
    try {
      pending->wait();
    } catch (const std::exception&) {
    }
  }

  // The collective `call` (of `bytes` per rank) posted on the flag path, or nullopt where it takes the
  // engine. Every rank decides alike (sizes, options, layout and transport agree), so the first call
  // that qualifies sets the segment up on every rank at once (a collective).
  std::optional<Work> flag_path(Communicator& comm, const CommOptions& o, size_t bytes, const FlagOp::Call& call) {
    if (bytes > std::min(o.flag_path_bytes, kFlagPayloadBytes) || group.endpoints.size() < 2) return std::nullopt;
    if (layout && layout->hosts() > 1) return std::nullopt;
    if (flag_setup == FlagSetup::kUntried) {
      try {
        set_up_flags(comm);
      } catch (const CommError&) {
        // The set-up's exchange failed (a peer never came, or died): this call fails with it, through
        // its Work like any collective's error.
        auto failed = std::make_shared<FlagOp>();
        failed->fail_unposted(std::current_exception(),
                              ErrorContext{transport->rank(), -1, call.name, next_seq++, call.post_bytes},
                              "setting up the flag path (rank 0's segment, every rank's mapping) failed: ");
        return Work(std::move(failed));
      }
    }
    if (flag_setup != FlagSetup::kOn) return std::nullopt;
    settle_flag_op();
    std::shared_ptr<FlagOp>& pooled = flag_pool[flag_ops % 2];  // reused once no Work holds it
    if (!pooled || pooled.use_count() > 1) pooled = std::make_shared<FlagOp>();
    OpPtr prior = last_ordered && last_ordered->state() == Op::State::kPending ? last_ordered : nullptr;
    pooled->post(flags, call, next_seq++, flag_ops++ % 2, o.timeout, group.context, std::move(prior), engine);
    flag_pending = pooled;
    return Work(pooled);
  }

  // Rank 0 creates the segment; every rank maps it and reports; on if all did.
  void set_up_flags(Communicator& comm) {
    flag_setup = FlagSetup::kOff;
    if (!transport->shares_host_memory() || !transport->separate_processes()) return;
    flag_setup = FlagSetup::kSettingUp;  // the exchanges below take the engine
    const size_t bytes = FlagSegment::bytes_for(static_cast<int>(group.endpoints.size()));
    std::string error;
    int fd = -1;
    Mapping mapping;
    if (group.rank == 0) mapping = create_memfd("fsdp-flag-path", bytes, fd, error);
    int64_t where[2] = {::getpid(), fd};
    int64_t mapped = 0;
    try {
      comm.broadcast(where, where, 2, DataType::kInt64, 0).wait();
      if (group.rank != 0 && where[1] >= 0) mapping = map_peer_memfd(static_cast<int>(where[0]), static_cast<int>(where[1]), bytes, error);
      mapped = mapping.data() ? 1 : 0;
      comm.all_reduce(&mapped, &mapped, 1, DataType::kInt64, ReduceOp{ReduceKind::kMin, 1.0}).wait();
    } catch (...) {
      if (fd >= 0) ::close(fd);
      flag_setup = FlagSetup::kOff;
      throw;
    }
    if (fd >= 0) ::close(fd);
    if (!mapped) {
      flag_setup = FlagSetup::kOff;  // the engine runs everything, as before
      return;
    }
    flags = std::make_shared<FlagSegment>(std::move(mapping), transport, group.endpoints, group.rank);
    flags->set_on_break([e = engine, st = stream](const std::string& why) { e->abort(st, why); });
    flag_setup = FlagSetup::kOn;
  }

  OpPtr new_op(const CommOptions& o, const char* name, size_t bytes, bool p2p, uint64_t seq, int peer = -1) {
    if (!p2p) settle_flag_op();
    OpPtr op = ops->acquire(ErrorContext{transport->rank(), -1, name, seq, bytes}, p2p ? p2p_group : group,
                            o.chunk_bytes, o.timeout);
    op->set_flight_id(FlightRecorder::instance().queued(op->context(), group.context, group.rank,
                                                        static_cast<int>(group.endpoints.size()), p2p, peer));
    return op;
  }
  // Hands the operation and its algorithm to the engine; ordered ones queue behind earlier collectives.
  Work submit(OpPtr op, Task task, bool ordered) {
    op->set_task(std::move(task));
    if (ordered) last_ordered = op;
    engine->submit(stream, op, ordered);
    return Work(std::move(op), engine);
  }
  // A collective: ordered, and fingerprinted first when the options ask for it.
  Work submit_collective(OpPtr op, Task task, const CommOptions& o, const char* name, size_t count = 0, int dtype = -1,
                         int root = -1, int reduce = -1) {
    const Fingerprint fingerprint = Fingerprint::of(name, op->context().seq, count, dtype, root, reduce);
    // A peer that took the flag path at this sequence number (a count on the other side of the limit)
    // finds this rank's call in its slot and fails at once naming both, instead of waiting out the timeout.
    if (flags) flags->mark_engine_call(flag_ops % 2, fingerprint);
    if (o.check_collectives) task = run_checked(*op, fingerprint, std::move(task));
    return submit(std::move(op), std::move(task), true);
  }
};

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Transport> transport, CommOptions options,
                                                   std::shared_ptr<ProgressEngine> engine, uint64_t context) {
  if (!transport) throw InvalidArgument("Communicator::create: null transport");
  std::vector<int> endpoints(transport->size());
  for (int i = 0; i < transport->size(); ++i) endpoints[i] = i;
  const int rank = transport->rank();
  return std::unique_ptr<Communicator>(
      new Communicator(std::move(transport), std::move(options), std::move(engine), context & ~kPointToPointBit,
                       std::move(endpoints), rank));
}

Communicator::Communicator(std::shared_ptr<Transport> transport, CommOptions options,
                           std::shared_ptr<ProgressEngine> engine, uint64_t context, std::vector<int> endpoints,
                           int rank)
    : options_(std::move(options)) {
  if (options_.timeout.count() <= 0) throw InvalidArgument("CommOptions::timeout must be positive");
  if (options_.chunk_bytes == 0) throw InvalidArgument("CommOptions::chunk_bytes must be positive");
  if (!engine) engine = std::make_shared<ProgressEngine>();
  impl_ = std::make_unique<Impl>(std::move(transport), std::move(engine), options_);
  impl_->group = GroupView{rank, std::move(endpoints), context};
  impl_->p2p_group = GroupView{rank, impl_->group.endpoints, context | kPointToPointBit};
  impl_->sends_to.assign(impl_->group.endpoints.size(), 0);
  impl_->recvs_from.assign(impl_->group.endpoints.size(), 0);
  impl_->stream = impl_->engine->open_stream(*impl_->transport);
}

Communicator::~Communicator() {
  if (impl_->flags) impl_->flags->set_on_break(nullptr);  // the stream goes; a pending flag op stays valid
  impl_->engine->close_stream(impl_->stream);
  if (impl_->windows) impl_->windows->release_peers();
}

int Communicator::rank() const { return impl_->group.rank; }
int Communicator::size() const { return static_cast<int>(impl_->group.endpoints.size()); }
int Communicator::global_rank(int r) const { return impl_->group.endpoints.at(r); }

namespace {

// Argument checks shared by the collectives. All throw InvalidArgument naming the call and the value.
struct Checker {
  const char* op;
  int rank;
  int size;

  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank) + ": " + what);
  }
  size_t bytes(size_t count, DataType t, size_t multiple = 1) const {
    if (!is_valid(t)) fail("invalid data type " + std::to_string(static_cast<int>(t)));
    const size_t elem = element_size(t);
    if (count > std::numeric_limits<size_t>::max() / elem / multiple) fail("count " + std::to_string(count) + " overflows");
    return count * elem * multiple;
  }
  void buffer(const void* p, size_t bytes, const char* which) const {
    if (!p && bytes > 0) fail(std::string("null ") + which + " buffer with " + std::to_string(bytes) + " bytes");
  }
  void reduce_op(ReduceOp r, DataType t) const {
    if (!is_valid(r.kind)) fail("invalid reduction op " + std::to_string(static_cast<int>(r.kind)));
    if (r.kind == ReduceKind::kPremulSum && !is_floating(t) && r.scalar != static_cast<double>(static_cast<long long>(r.scalar))) {
      fail("premul-sum scalar " + std::to_string(r.scalar) + " is not an integer, but the type " +
           std::string(name(t)) + " is");
    }
  }
  void root(int r) const {
    if (r < 0 || r >= size) fail("root " + std::to_string(r) + " is outside [0, " + std::to_string(size) + ")");
  }
  void peer(int p) const {
    if (p < 0 || p >= size) fail("peer " + std::to_string(p) + " is outside [0, " + std::to_string(size) + ")");
  }
  // The byte blocks of an all_to_all_v buffer from per-rank element counts and displacements.
  PeerBlocks blocks(std::span<const size_t> counts, std::span<const size_t> displs, DataType t, const void* buf,
                    const char* which) const {
    if (counts.size() != static_cast<size_t>(size) || displs.size() != static_cast<size_t>(size)) {
      fail(std::string(which) + " counts and displacements need " + std::to_string(size) + " entries each, got " +
           std::to_string(counts.size()) + " and " + std::to_string(displs.size()));
    }
    PeerBlocks b{std::pmr::vector<size_t>(size), std::pmr::vector<size_t>(size)};
    for (int r = 0; r < size; ++r) {
      if (counts[r] > std::numeric_limits<size_t>::max() - displs[r]) {
        fail(std::string(which) + " block of rank " + std::to_string(r) + " overflows");
      }
      b.offset[r] = bytes(displs[r], t);
      b.bytes[r] = bytes(counts[r], t);
      bytes(displs[r] + counts[r], t);  // the block's end must be addressable too
      buffer(buf, b.bytes[r], which);
    }
    return b;
  }
  // Bytes from the buffer's start to the end of its last block.
  static size_t extent(const PeerBlocks& b) {
    size_t end = 0;
    for (size_t r = 0; r < b.bytes.size(); ++r) {
      if (b.bytes[r] > 0) end = std::max(end, b.offset[r] + b.bytes[r]);
    }
    return end;
  }
  // Receive blocks written by different peers must not overlap (ranks named), nor the send buffer.
  void disjoint_receives(const PeerBlocks& recv, const void* recv_buf, const PeerBlocks& send,
                         const void* send_buf) const {
    std::vector<int> order(size);
    for (int r = 0; r < size; ++r) order[r] = r;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return recv.offset[a] < recv.offset[b]; });
    int last = -1;  // the non-empty block reaching furthest so far
    for (int r : order) {
      if (recv.bytes[r] == 0) continue;
      if (last >= 0 && recv.offset[r] < recv.offset[last] + recv.bytes[last]) {
        fail("receive blocks of ranks " + std::to_string(last) + " and " + std::to_string(r) + " overlap");
      }
      if (last < 0 || recv.offset[r] + recv.bytes[r] > recv.offset[last] + recv.bytes[last]) last = r;
    }
    if (overlaps(send_buf, extent(send), recv_buf, extent(recv))) fail("send and recv overlap");
  }
  // `inner` must either not overlap `outer` or be exactly the slice at `slice_offset`.
  void in_place_layout(const void* outer, size_t outer_bytes, const void* inner, size_t inner_bytes,
                       size_t slice_offset, const char* what) const {
    if (!overlaps(outer, outer_bytes, inner, inner_bytes)) return;
    if (static_cast<const std::byte*>(outer) + slice_offset == inner) return;
    fail(std::string("buffers overlap but ") + what);
  }
};

}  // namespace

Work Communicator::all_gather(const void* send, void* recv, size_t count, DataType type) {
  Checker check{"all_gather", rank(), size()};
  const size_t block = check.bytes(count, type);
  const size_t total = check.bytes(count, type, size());
  check.buffer(send, block, "send");
  check.buffer(recv, total, "recv");
  check.in_place_layout(recv, total, send, block, rank() * block, "send is not this rank's block of recv");
  if (auto w = impl_->flag_path(*this, options_, block,
                                {FlagCollective::kAllGather, "all_gather", send, block, recv, count, type, {}, -1, block})) {
    return *w;
  }
  auto op = impl_->new_op(options_, "all_gather", total, false, impl_->next_seq++);
  return impl_->submit_collective(
      op,
      run_all_gather(*op, send, static_cast<std::byte*>(recv), block,
                     impl_->algorithms.small("all_gather", total, options_.small_message_bytes),
                     impl_->hierarchy("all_gather", total, options_),
                     // Peers read this rank's block: from send, or from recv once send is copied there.
                     impl_->window_plan(send, block, static_cast<std::byte*>(recv) + rank() * block)),
      options_, "all_gather", count, static_cast<int>(type));
}

Work Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp rop) {
  Checker check{"reduce_scatter", rank(), size()};
  const size_t block = check.bytes(recv_count, type);
  const size_t total = check.bytes(recv_count, type, size());
  check.reduce_op(rop, type);
  check.buffer(send, total, "send");
  check.buffer(recv, block, "recv");
  check.in_place_layout(send, total, recv, block, rank() * block, "recv is not this rank's block of send");
  if (auto w = impl_->flag_path(
          *this, options_, total,
          {FlagCollective::kReduceScatter, "reduce_scatter", send, total, recv, recv_count, type, rop, -1, block})) {
    return *w;
  }
  auto op = impl_->new_op(options_, "reduce_scatter", total, false, impl_->next_seq++);
  return impl_->submit_collective(
      op,
      run_reduce_scatter(*op, ReductionPlan(type, rop), send, recv, recv_count,
                         impl_->algorithms.small("reduce_scatter", total, options_.small_message_bytes),
                         impl_->hierarchy("reduce_scatter", total, options_), impl_->window_plan(send, total)),
      options_, "reduce_scatter", recv_count, static_cast<int>(type), -1, static_cast<int>(rop.kind));
}

Work Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp rop) {
  Checker check{"all_reduce", rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.reduce_op(rop, type);
  check.buffer(send, bytes, "send");
  check.buffer(recv, bytes, "recv");
  check.in_place_layout(recv, bytes, send, bytes, 0, "send != recv (in place means the same pointer)");
  if (auto w = impl_->flag_path(*this, options_, bytes,
                                {FlagCollective::kAllReduce, "all_reduce", send, bytes, recv, count, type, rop, -1, bytes})) {
    return *w;
  }
  auto op = impl_->new_op(options_, "all_reduce", bytes, false, impl_->next_seq++);
  return impl_->submit_collective(
      op,
      run_all_reduce(*op, ReductionPlan(type, rop), send, recv, count,
                     impl_->algorithms.small("all_reduce", bytes, options_.small_message_bytes),
                     impl_->hierarchy("all_reduce", bytes, options_),
                     impl_->window_plan(send, bytes, nullptr, recv, bytes, true)),
      options_, "all_reduce", count, static_cast<int>(type), -1, static_cast<int>(rop.kind));
}

Work Communicator::broadcast(const void* send, void* recv, size_t count, DataType type, int root) {
  Checker check{"broadcast", rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.root(root);
  if (rank() == root) {
    check.buffer(send, bytes, "send");
    check.in_place_layout(recv, bytes, send, bytes, 0, "send != recv (in place means the same pointer)");
  }
  check.buffer(recv, bytes, "recv");
  const bool root_here = rank() == root;
  if (auto w = impl_->flag_path(*this, options_, bytes,
                                {FlagCollective::kBroadcast, "broadcast", root_here ? send : nullptr,
                                 root_here ? bytes : 0, recv, count, type, {}, root, bytes})) {
    return *w;
  }
  auto op = impl_->new_op(options_, "broadcast", bytes, false, impl_->next_seq++);
  return impl_->submit_collective(
      op,
      run_broadcast(*op, send, static_cast<std::byte*>(recv), bytes, root,
                    impl_->algorithms.small("broadcast", bytes, options_.small_message_bytes)),
      options_, "broadcast", count, static_cast<int>(type), root);
}

Work Communicator::reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp rop, int root) {
  Checker check{"reduce", rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.reduce_op(rop, type);
  check.root(root);
  check.buffer(send, bytes, "send");
  if (rank() == root) {
    check.buffer(recv, bytes, "recv");
    check.in_place_layout(recv, bytes, send, bytes, 0, "send != recv (in place means the same pointer)");
  }
  if (auto w = impl_->flag_path(*this, options_, bytes,
                                {FlagCollective::kReduce, "reduce", send, bytes, recv, count, type, rop, root, bytes})) {
    return *w;
  }
  auto op = impl_->new_op(options_, "reduce", bytes, false, impl_->next_seq++);
  return impl_->submit_collective(op,
                                  run_reduce(*op, ReductionPlan(type, rop), send, recv, count, root,
                                             impl_->algorithms.small("reduce", bytes, options_.small_message_bytes)),
                                  options_, "reduce", count, static_cast<int>(type), root, static_cast<int>(rop.kind));
}

Work Communicator::all_to_all(const void* send, void* recv, size_t count, DataType type) {
  Checker check{"all_to_all", rank(), size()};
  const size_t block = check.bytes(count, type);
  const size_t total = check.bytes(count, type, size());
  check.buffer(send, total, "send");
  check.buffer(recv, total, "recv");
  if (overlaps(send, total, recv, total)) check.fail("send and recv overlap");
  auto op = impl_->new_op(options_, "all_to_all", total, false, impl_->next_seq++);
  const bool small = impl_->algorithms.small("all_to_all", total, options_.small_message_bytes);
  return impl_->submit_collective(op,
                                  run_all_to_all(*op, send, recv, block, small,
                                                 impl_->window_plan_all_to_all(send, total)),
                                  options_, "all_to_all", count, static_cast<int>(type));
}

Work Communicator::all_to_all_v(const void* send, std::span<const size_t> send_counts,
                                std::span<const size_t> send_displs, void* recv, std::span<const size_t> recv_counts,
                                std::span<const size_t> recv_displs, DataType type) {
  Checker check{"all_to_all_v", rank(), size()};
  PeerBlocks send_blocks = check.blocks(send_counts, send_displs, type, send, "send");
  PeerBlocks recv_blocks = check.blocks(recv_counts, recv_displs, type, recv, "recv");
  check.disjoint_receives(recv_blocks, recv, send_blocks, send);
  if (send_counts[rank()] != recv_counts[rank()]) {
    check.fail("this rank sends itself " + std::to_string(send_counts[rank()]) + " elements but expects " +
               std::to_string(recv_counts[rank()]));
  }
  size_t sent = 0;
  for (size_t b : send_blocks.bytes) sent += b;
  auto op = impl_->new_op(options_, "all_to_all_v", sent, false, impl_->next_seq++);
  // Counts differ per rank by design: the fingerprint holds the type only (the transport checks sizes).
  WindowPlan windows = impl_->window_plan_all_to_all(send, Checker::extent(send_blocks));
  return impl_->submit_collective(
      op, run_all_to_all_v(*op, send, std::move(send_blocks), recv, std::move(recv_blocks), std::move(windows)),
      options_, "all_to_all_v", 0, static_cast<int>(type));
}

Work Communicator::barrier() {
  if (auto w = impl_->flag_path(*this, options_, 0, {})) return *w;
  auto op = impl_->new_op(options_, "barrier", 0, false, impl_->next_seq++);
  return impl_->submit_collective(op, run_barrier(*op), options_, "barrier");
}

Work Communicator::send(const void* buf, size_t count, DataType type, int peer) {
  Checker check{"send", rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.peer(peer);
  check.buffer(buf, bytes, "send");
  auto op = impl_->new_op(options_, "send", bytes, true, impl_->sends_to[peer]++, peer);
  return impl_->submit(op, run_send(*op, buf, bytes, peer), false);
}

Work Communicator::recv(void* buf, size_t count, DataType type, int peer) {
  Checker check{"recv", rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.peer(peer);
  check.buffer(buf, bytes, "recv");
  auto op = impl_->new_op(options_, "recv", bytes, true, impl_->recvs_from[peer]++, peer);
  return impl_->submit(op, run_recv(*op, buf, bytes, peer), false);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  const int n = size();
  std::vector<int64_t> mine{color, key};
  std::vector<int64_t> all(2 * n);
  const uint64_t seq = impl_->next_seq;  // the all-gather below; every member sees the same one
  all_gather(mine.data(), all.data(), 2, DataType::kInt64).wait();
  if (color < 0) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < n; ++r) {
    if (all[2 * r] == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  std::vector<int> endpoints;
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    endpoints.push_back(impl_->group.endpoints[members[i]]);
    if (members[i] == rank()) new_rank = static_cast<int>(i);
  }
  const uint64_t context = mix(impl_->group.context ^ mix(seq) ^ mix(static_cast<uint64_t>(color) + 0x1234567ull));
  std::unique_ptr<Communicator> child(
      new Communicator(impl_->transport, options_, impl_->engine, context, std::move(endpoints), new_rank));
  if (impl_->layout) child->impl_->layout = std::make_shared<const HostLayout>(impl_->layout->subset(members));
  return child;
}

void Communicator::set_host_layout(const std::vector<int>& host_of_rank) {
  if (host_of_rank.size() != static_cast<size_t>(size())) {
    throw InvalidArgument("set_host_layout on rank " + std::to_string(rank()) + ": " +
                          std::to_string(host_of_rank.size()) + " entries for " + std::to_string(size()) + " ranks");
  }
  impl_->layout = std::make_shared<const HostLayout>(host_of_rank);
}

std::string Communicator::algorithm_for(const std::string& collective, size_t bytes) const {
  const bool has_hierarchical = collective == "all_gather" || collective == "reduce_scatter" || collective == "all_reduce";
  if (has_hierarchical && impl_->hierarchy(collective.c_str(), bytes, options_)) return "hierarchical";
  return impl_->algorithms.flat_name(collective, bytes, options_.small_message_bytes);
}

int Communicator::host_count() const { return impl_->layout ? impl_->layout->hosts() : 1; }
int Communicator::local_rank() const { return impl_->layout ? impl_->layout->local_index(rank()) : rank(); }
int Communicator::local_size() const {
  return impl_->layout ? static_cast<int>(impl_->layout->ranks_on(impl_->layout->host_of(rank())).size()) : size();
}
int Communicator::host_of(int r) const { return impl_->layout ? impl_->layout->host_of(r) : 0; }

void Communicator::abort(const std::string& why) {
  if (impl_->flags) impl_->flags->break_with(why, true);
  impl_->engine->abort(impl_->stream, why);
  // Nothing of this communicator runs any more: the peers' windows and the control block can go.
  if (impl_->windows) impl_->windows->release_peers();
}

uint64_t Communicator::flag_path_collectives() const { return impl_->flag_ops; }

uint64_t Communicator::windowed_collectives() const {
  return impl_->windows ? impl_->windows->windowed_runs() : 0;
}

Window Communicator::alloc_window(size_t bytes, MemoryTracker* tracker, MemoryCategory category) {
  int fd = -1;
  std::string error;
  Mapping own = create_memfd("fsdp-window", bytes, fd, error);
  std::byte* data = own.data();
  const size_t file_bytes = own.bytes();
  Window w;
  try {
    w = make_window(std::move(own), data, bytes, fd, 0, file_bytes, error);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    throw;
  }
  if (fd >= 0) ::close(fd);  // every peer mapped it (or never will): the mappings keep the memory
  if (tracker) {
    w.tracker_ = tracker;
    w.category_ = category;
    tracker->allocate(category, static_cast<int64_t>(bytes));
  }
  return w;
}

Window Communicator::share_window(void* data, size_t bytes, int fd, size_t offset, size_t file_bytes) {
  if (fd >= 0 && (offset > file_bytes || bytes > file_bytes - offset)) {
    throw InvalidArgument("share_window on rank " + std::to_string(rank()) + ": " + std::to_string(bytes) +
                          " bytes at offset " + std::to_string(offset) + " run past the " +
                          std::to_string(file_bytes) + "-byte file");
  }
  return make_window(Mapping(), static_cast<std::byte*>(data), bytes, fd, offset, file_bytes,
                     fd < 0 ? "its buffer is not in shareable memory (alloc_window, ncclMemAlloc)" : "");
}

Window Communicator::make_window(Mapping owned, std::byte* data, size_t bytes, int fd, size_t offset,
                                 size_t file_bytes, const std::string& error_here) {
  const int n = size();
  const int me = rank();
  if (!impl_->windows) impl_->windows = std::make_shared<WindowTable>(me, n);
  WindowTable& table = *impl_->windows;
  const ErrorContext ctx{global_rank(me), -1, "alloc_window", impl_->next_seq, bytes};
  Window w;
  w.table_ = impl_->windows;
  w.id_ = table.next_id();
  w.bytes_ = bytes;
  w.data_ = data;
  std::string error = error_here;
  std::vector<WindowTable::PeerWindow> peers;

  if (!impl_->transport->shares_host_memory()) {
    if (fd < 0) throw CommError(ctx, "could not allocate a window: " + error);
    w.why_not_shared_ = "the " + std::string(impl_->transport->name()) + " transport does not share memory between ranks";
  } else {
    // Every rank learns every peer's memfd, maps it while its owner keeps the fd open, and reports
    // back; the second exchange is also the point after which the fds may close.
    const bool first = !table.control();
    int control_fd = -1;
    Mapping control;
    const size_t control_bytes = control_block_bytes(n);
    if (first && me == 0 && fd >= 0) control = create_memfd("fsdp-window-control", control_bytes, control_fd, error);
    const bool ready = fd >= 0 && (!first || me != 0 || control.data());
    constexpr size_t kFields = 6;  // pid, fd, file bytes, control fd, offset, window bytes
    std::vector<int64_t> mine{::getpid(), ready ? fd : -1, static_cast<int64_t>(file_bytes), control_fd,
                              static_cast<int64_t>(offset), static_cast<int64_t>(bytes)};
    std::vector<int64_t> all(kFields * static_cast<size_t>(n));
    auto close_control = [&] {
      if (control_fd >= 0) ::close(control_fd);
      control_fd = -1;
    };
    try {
      all_gather(mine.data(), all.data(), kFields, DataType::kInt64).wait();
    } catch (...) {
      close_control();
      throw;
    }
    for (int p = 0; p < n; ++p) {
      if (all[kFields * p + 1] >= 0) continue;
      close_control();
      throw CommError(ctx, "rank " + std::to_string(p) + " has no window of " + std::to_string(bytes) + " bytes" +
                               (p == me ? ": " + error : std::string(" (its own error says why)")));
    }
    peers.resize(static_cast<size_t>(n));
    for (int p = 0; p < n && error.empty(); ++p) {
      const int64_t* r = &all[kFields * p];
      if (p == me) continue;
      peers[p].file = map_peer_memfd(static_cast<int>(r[0]), static_cast<int>(r[1]), static_cast<size_t>(r[2]), error);
      peers[p].offset = static_cast<size_t>(r[4]);
      peers[p].bytes = static_cast<size_t>(r[5]);
    }
    if (first && me != 0 && error.empty()) {
      control = map_peer_memfd(static_cast<int>(all[0]), static_cast<int>(all[3]), control_bytes, error);
    }
    int64_t mapped = error.empty() ? 1 : 0;
    std::vector<int64_t> everyone(static_cast<size_t>(n));
    try {
      all_gather(&mapped, everyone.data(), 1, DataType::kInt64).wait();
    } catch (...) {
      close_control();
      throw;
    }
    close_control();
    const auto refused = std::find(everyone.begin(), everyone.end(), 0);
    if (refused == everyone.end()) {
      if (first) table.set_control(std::move(control));
      w.shared_ = true;
    } else {
      peers.clear();
      const int who = static_cast<int>(refused - everyone.begin());
      w.why_not_shared_ = "rank " + std::to_string(who) + " could not map its peers' windows" +
                          (who == me ? ": " + error : std::string(" (its error says why)"));
    }
  }
  table.add(w.id_, std::move(owned), data, bytes, std::move(peers));
  return w;
}

}  // namespace fsdp
