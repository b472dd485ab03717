#include "collectives/communicator.h"

#include <algorithm>

#include "collectives/argument_checks.h"
#include "collectives/communicator_impl.h"
#include "collectives/dispatch.h"
#include "common/splitmix.h"

namespace fsdp {
namespace {

uint64_t mix(uint64_t x) { return splitmix64(x) & ~kPointToPointBit; }  // spreads a child context over 64 bits

}  // namespace

Communicator::Impl::Impl(std::shared_ptr<Transport> t, std::shared_ptr<ProgressEngine> e, const CommOptions& o)
    : transport(std::move(t)),
      engine(std::move(e)),
      ops(OpPool::create(*transport, scratch)),
      algorithms(o.algorithms) {}

std::shared_ptr<const HostLayout> Communicator::Impl::hierarchy(CollectiveKind collective, size_t bytes,
                                                                const CommOptions& o) const {
  const bool multi_host = layout && layout->hosts() > 1;
  if (!algorithms.hierarchical(collective, bytes, o.small_message_bytes, multi_host)) return nullptr;
  return layout ? layout : std::make_shared<const HostLayout>(std::vector<int>(group.endpoints.size(), 0));
}

OpPtr Communicator::Impl::new_op(const CommOptions& o, CollectiveKind kind, size_t bytes, bool p2p, uint64_t seq,
                                 int peer) {
  if (!p2p) settle_flag_op();
  OpPtr op = ops->acquire(ErrorContext{transport->rank(), -1, std::string(name(kind)), seq, bytes},
                          p2p ? p2p_group : group, o.chunk_bytes, o.timeout);
  op->set_flight_id(FlightRecorder::instance().queued(kind, op->context(), group.context, group.rank,
                                                      static_cast<int>(group.endpoints.size()), p2p, peer));
  return op;
}

Work Communicator::Impl::submit(OpPtr op, Task task, bool ordered) {
  op->set_task(std::move(task));
  if (ordered) last_ordered = op;
  engine->submit(stream, op, ordered);
  return Work(std::move(op), engine);
}

Work Communicator::Impl::submit_collective(OpPtr op, Task task, const CommOptions& o, CollectiveKind kind, size_t count,
                                           int dtype, int root, int reduce) {
  const Fingerprint fingerprint = Fingerprint::of(kind, op->context().seq, count, dtype, root, reduce);
  if (o.check_collectives) task = run_checked(*op, fingerprint, std::move(task));
  if (flags) {
    // A peer that took the flag path at this sequence number (a count on the other side of the limit)
    // finds this rank's call in its slot and fails at once naming both; this rank finds the peer's
    // post (or differing mark) in the peer's slot before the algorithm starts, and fails alike.
    flags->mark_engine_call(flag_ops % 2, fingerprint);
    task = run_after_peer_calls(*op, flags, flag_ops % 2, fingerprint, std::move(task));
  }
  return submit(std::move(op), std::move(task), true);
}

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Transport> transport, CommOptions options,
                                                   std::shared_ptr<ProgressEngine> engine, uint64_t context) {
  if (!transport) throw InvalidArgument("Communicator::create: null transport");
  std::vector<int> endpoints(transport->size());
  for (int i = 0; i < transport->size(); ++i) endpoints[i] = i;
  const int rank = transport->rank();
  return std::unique_ptr<Communicator>(new Communicator(std::move(transport), std::move(options), std::move(engine),
                                                        context & ~kPointToPointBit, std::move(endpoints), rank));
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

Work Communicator::all_gather(const void* send, void* recv, size_t count, DataType type) {
  Checker check{CollectiveKind::kAllGather, rank(), size()};
  const size_t block = check.bytes(count, type);
  const size_t total = check.bytes(count, type, size());
  check.buffer(send, block, "send");
  check.buffer(recv, total, "recv");
  check.in_place_layout(recv, total, send, block, rank() * block, "send is not this rank's block of recv");
  if (auto w = impl_->flag_path(*this, options_, block,
                                {CollectiveKind::kAllGather, send, block, recv, count, type, {}, -1, block})) {
    return *w;
  }
  return submit_all_gather(send, recv, count, type, {});
}

Work Communicator::all_gather_into_runs(const void* send, void* recv, size_t count, DataType type,
                                        std::span<const GatherRun> runs) {
  Checker check{CollectiveKind::kAllGather, rank(), size()};
  const size_t block = check.bytes(count, type);
  check.buffer(send, block, "send");
  const size_t extent = check.runs(runs, block, type);
  check.buffer(recv, extent, "recv");
  if (overlaps(send, block, recv, extent)) check.fail("send overlaps the recv bytes the runs write");
  if (auto failed = impl_->set_up_at_first_collective(
          *this, Fingerprint::of(CollectiveKind::kAllGather, 0, count, static_cast<int>(type)), block)) {
    return *failed;
  }
  return submit_all_gather(send, recv, count, type, runs);
}

Work Communicator::submit_all_gather(const void* send, void* recv, size_t count, DataType type,
                                     std::span<const GatherRun> runs) {
  const size_t block = count * element_size(type), total = block * static_cast<size_t>(size());
  auto op = impl_->new_op(options_, CollectiveKind::kAllGather, total, false, impl_->next_seq++);
  // Peers read this rank's block: from send, or (rank-major) from recv once send is copied there.
  const void* fallback_read = runs.empty() ? static_cast<std::byte*>(recv) + rank() * block : nullptr;
  return impl_->submit_collective(op,
                                  run_all_gather(*op, send, static_cast<std::byte*>(recv), block,
                                                 impl_->small(CollectiveKind::kAllGather, total, options_),
                                                 impl_->hierarchy(CollectiveKind::kAllGather, total, options_),
                                                 impl_->window_plan(send, block, fallback_read),
                                                 std::pmr::vector<GatherRun>(runs.begin(), runs.end(), &op->arena())),
                                  options_, CollectiveKind::kAllGather, count, static_cast<int>(type));
}

Work Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp rop) {
  Checker check{CollectiveKind::kReduceScatter, rank(), size()};
  const size_t block = check.bytes(recv_count, type);
  const size_t total = check.bytes(recv_count, type, size());
  check.reduce_op(rop, type);
  check.buffer(send, total, "send");
  check.buffer(recv, block, "recv");
  check.in_place_layout(send, total, recv, block, rank() * block, "recv is not this rank's block of send");
  if (auto w =
          impl_->flag_path(*this, options_, total,
                           {CollectiveKind::kReduceScatter, send, total, recv, recv_count, type, rop, -1, block})) {
    return *w;
  }
  auto op = impl_->new_op(options_, CollectiveKind::kReduceScatter, total, false, impl_->next_seq++);
  return impl_->submit_collective(op,
                                  run_reduce_scatter(*op, ReductionPlan(type, rop), send, recv, recv_count,
                                                     impl_->small(CollectiveKind::kReduceScatter, total, options_),
                                                     impl_->hierarchy(CollectiveKind::kReduceScatter, total, options_),
                                                     impl_->window_plan(send, total)),
                                  options_, CollectiveKind::kReduceScatter, recv_count, static_cast<int>(type), -1,
                                  static_cast<int>(rop.kind));
}

Work Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp rop) {
  Checker check{CollectiveKind::kAllReduce, rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.reduce_op(rop, type);
  check.buffer(send, bytes, "send");
  check.buffer(recv, bytes, "recv");
  check.in_place_layout(recv, bytes, send, bytes, 0, "send != recv (in place means the same pointer)");
  if (auto w = impl_->flag_path(*this, options_, bytes,
                                {CollectiveKind::kAllReduce, send, bytes, recv, count, type, rop, -1, bytes})) {
    return *w;
  }
  auto op = impl_->new_op(options_, CollectiveKind::kAllReduce, bytes, false, impl_->next_seq++);
  return impl_->submit_collective(op,
                                  run_all_reduce(*op, ReductionPlan(type, rop), send, recv, count,
                                                 impl_->small(CollectiveKind::kAllReduce, bytes, options_),
                                                 impl_->hierarchy(CollectiveKind::kAllReduce, bytes, options_),
                                                 impl_->window_plan(send, bytes, nullptr, recv, bytes, true)),
                                  options_, CollectiveKind::kAllReduce, count, static_cast<int>(type), -1,
                                  static_cast<int>(rop.kind));
}

Work Communicator::broadcast(const void* send, void* recv, size_t count, DataType type, int root) {
  Checker check{CollectiveKind::kBroadcast, rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.root(root);
  if (rank() == root) {
    check.buffer(send, bytes, "send");
    check.in_place_layout(recv, bytes, send, bytes, 0, "send != recv (in place means the same pointer)");
  }
  check.buffer(recv, bytes, "recv");
  const bool root_here = rank() == root;
  if (auto w = impl_->flag_path(*this, options_, bytes,
                                {CollectiveKind::kBroadcast,
                                 root_here ? send : nullptr,
                                 root_here ? bytes : 0,
                                 recv,
                                 count,
                                 type,
                                 {},
                                 root,
                                 bytes})) {
    return *w;
  }
  auto op = impl_->new_op(options_, CollectiveKind::kBroadcast, bytes, false, impl_->next_seq++);
  return impl_->submit_collective(op,
                                  run_broadcast(*op, send, static_cast<std::byte*>(recv), bytes, root,
                                                impl_->small(CollectiveKind::kBroadcast, bytes, options_)),
                                  options_, CollectiveKind::kBroadcast, count, static_cast<int>(type), root);
}

Work Communicator::reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp rop, int root) {
  Checker check{CollectiveKind::kReduce, rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.reduce_op(rop, type);
  check.root(root);
  check.buffer(send, bytes, "send");
  if (rank() == root) {
    check.buffer(recv, bytes, "recv");
    check.in_place_layout(recv, bytes, send, bytes, 0, "send != recv (in place means the same pointer)");
  }
  if (auto w = impl_->flag_path(*this, options_, bytes,
                                {CollectiveKind::kReduce, send, bytes, recv, count, type, rop, root, bytes})) {
    return *w;
  }
  auto op = impl_->new_op(options_, CollectiveKind::kReduce, bytes, false, impl_->next_seq++);
  return impl_->submit_collective(op,
                                  run_reduce(*op, ReductionPlan(type, rop), send, recv, count, root,
                                             impl_->small(CollectiveKind::kReduce, bytes, options_)),
                                  options_, CollectiveKind::kReduce, count, static_cast<int>(type), root,
                                  static_cast<int>(rop.kind));
}

Work Communicator::all_to_all(const void* send, void* recv, size_t count, DataType type) {
  Checker check{CollectiveKind::kAllToAll, rank(), size()};
  const size_t block = check.bytes(count, type);
  const size_t total = check.bytes(count, type, size());
  check.buffer(send, total, "send");
  check.buffer(recv, total, "recv");
  if (overlaps(send, total, recv, total)) check.fail("send and recv overlap");
  if (auto failed = impl_->set_up_at_first_collective(
          *this, Fingerprint::of(CollectiveKind::kAllToAll, 0, count, static_cast<int>(type)), total)) {
    return *failed;
  }
  auto op = impl_->new_op(options_, CollectiveKind::kAllToAll, total, false, impl_->next_seq++);
  const bool small = impl_->small(CollectiveKind::kAllToAll, total, options_);
  return impl_->submit_collective(
      op, run_all_to_all(*op, send, recv, block, small, impl_->window_plan_all_to_all(send, total)), options_,
      CollectiveKind::kAllToAll, count, static_cast<int>(type));
}

Work Communicator::all_to_all_v(const void* send, std::span<const size_t> send_counts,
                                std::span<const size_t> send_displs, void* recv, std::span<const size_t> recv_counts,
                                std::span<const size_t> recv_displs, DataType type) {
  Checker check{CollectiveKind::kAllToAllV, rank(), size()};
  PeerBlocks send_blocks = check.blocks(send_counts, send_displs, type, send, "send");
  PeerBlocks recv_blocks = check.blocks(recv_counts, recv_displs, type, recv, "recv");
  check.disjoint_receives(recv_blocks, recv, send_blocks, send);
  if (send_counts[rank()] != recv_counts[rank()]) {
    check.fail("this rank sends itself " + std::to_string(send_counts[rank()]) + " elements but expects " +
               std::to_string(recv_counts[rank()]));
  }
  size_t sent = 0;
  for (size_t b : send_blocks.bytes) sent += b;
  if (auto failed = impl_->set_up_at_first_collective(
          *this, Fingerprint::of(CollectiveKind::kAllToAllV, 0, 0, static_cast<int>(type)), sent)) {
    return *failed;
  }
  auto op = impl_->new_op(options_, CollectiveKind::kAllToAllV, sent, false, impl_->next_seq++);
  // Counts differ per rank by design: the fingerprint holds the type only (the transport checks sizes).
  WindowPlan windows = impl_->window_plan_all_to_all(send, Checker::extent(send_blocks));
  return impl_->submit_collective(
      op, run_all_to_all_v(*op, send, std::move(send_blocks), recv, std::move(recv_blocks), std::move(windows)),
      options_, CollectiveKind::kAllToAllV, 0, static_cast<int>(type));
}

Work Communicator::barrier() {
  if (auto w = impl_->flag_path(*this, options_, 0, {})) return *w;
  auto op = impl_->new_op(options_, CollectiveKind::kBarrier, 0, false, impl_->next_seq++);
  return impl_->submit_collective(op, run_barrier(*op), options_, CollectiveKind::kBarrier);
}

Work Communicator::send(const void* buf, size_t count, DataType type, int peer) {
  Checker check{CollectiveKind::kSend, rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.peer(peer);
  check.buffer(buf, bytes, "send");
  auto op = impl_->new_op(options_, CollectiveKind::kSend, bytes, true, impl_->sends_to[peer]++, peer);
  return impl_->submit(op, run_send(*op, buf, bytes, peer), false);
}

Work Communicator::recv(void* buf, size_t count, DataType type, int peer) {
  Checker check{CollectiveKind::kRecv, rank(), size()};
  const size_t bytes = check.bytes(count, type);
  check.peer(peer);
  check.buffer(buf, bytes, "recv");
  auto op = impl_->new_op(options_, CollectiveKind::kRecv, bytes, true, impl_->recvs_from[peer]++, peer);
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

std::string Communicator::algorithm_for(CollectiveKind collective, size_t bytes) const {
  const bool has_hierarchical = collective == CollectiveKind::kAllGather ||
                                collective == CollectiveKind::kReduceScatter ||
                                collective == CollectiveKind::kAllReduce;
  if (has_hierarchical && impl_->hierarchy(collective, bytes, options_)) return "hierarchical";
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

uint64_t Communicator::windowed_collectives() const { return impl_->windows ? impl_->windows->windowed_runs() : 0; }

}  // namespace fsdp
