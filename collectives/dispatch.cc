#include "collectives/dispatch.h"

#include "collectives/quantized.h"
#include "collectives/kernels/stream_copy.h"

namespace fsdp {

namespace {

// The message-passing all-gather the caller picked, in place over recv (rank-major, this rank's block
// there already): the flat ring (layout null), the hierarchical one, or Bruck for small messages.
Task gather_by_messages(Op& op, std::byte* recv, size_t block_bytes, bool small,
                        const std::shared_ptr<const HostLayout>& layout) {
  if (layout) {
    co_await allgather_hierarchical(op, recv, Blocks{block_bytes * op.size(), op.size(), 1}, *layout);
  } else if (small) {
    co_await allgather_bruck(op, recv, block_bytes);
  } else {
    co_await allgather_ring(op, recv, Blocks{block_bytes * op.size(), op.size(), 1});
  }
}

}  // namespace

Task run_all_gather(Op& op, const void* send, std::byte* recv, size_t block_bytes, bool small,
                    std::shared_ptr<const HostLayout> layout, WindowPlan windows, std::pmr::vector<GatherRun> runs) {
  const int n = op.size();
  const auto* own_block = static_cast<const std::byte*>(send);
  // Rank-major, this rank's block is recv's; into runs, the own block's pieces go where the runs say.
  std::byte* mine = runs.empty() ? recv + op.rank() * block_bytes : nullptr;
  if (windows.table) {
    // Out of place, the own block's copy fills the wait for the peers' posts; the rest runs in step
    // with the peers' blocks (allgather_window.cc).
    ChunkedCopy own;
    if (!runs.empty()) {
      own = ChunkedCopy(recv, own_block, block_bytes, runs, op.rank());
    } else if (send != mine) {
      own = ChunkedCopy(mine, own_block, block_bytes);
    }
    WindowSync sync(op, std::move(windows));
    sync.post();
    while (!own.finished() && !sync.peers_posted()) own.copy_through(own.copied() + kWindowCopyChunkBytes);
    co_await sync.agree();
    if (sync.windowed()) {
      co_await allgather_window(op, sync, recv, block_bytes, runs, own);
      co_return;
    }
    // Not every rank's buffers are windows: the rest of the own block in cache for the ring or Bruck.
    if (mine != nullptr && send != mine) {
      copy_bytes(mine + own.copied(), own_block + own.copied(), block_bytes - own.copied());
    }
  } else if (mine != nullptr && send != mine) {
    copy_bytes(mine, send, block_bytes);  // the ring and Bruck read it back at once: keep it in cache
  }
  if (runs.empty()) {
    co_await gather_by_messages(op, recv, block_bytes, small, layout);
    co_return;
  }
  // Into runs without windows: rank-major in scratch, then every block placed (one rank: placed at once).
  if (n == 1) {
    ChunkedCopy(recv, own_block, block_bytes, runs, 0).copy_through(block_bytes);
    co_return;
  }
  std::byte* flat = op.scratch(kScratchPlaced, block_bytes * n);
  copy_bytes(flat + op.rank() * block_bytes, own_block, block_bytes);
  co_await gather_by_messages(op, flat, block_bytes, small, layout);
  for (int p = 0; p < n; ++p) ChunkedCopy(recv, flat + p * block_bytes, block_bytes, runs, p).copy_through(block_bytes);
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

Task run_all_to_all_v(Op& op, const void* send, PeerBlocks send_blocks, void* recv, PeerBlocks recv_blocks,
                      WindowPlan windows, bool small_equal) {
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

Task run_then_sum_mxfp8(Op&, Task exchange, Mxfp8Sums s) {
  co_await exchange;
  mx::finish_reduce_scatter(s.recv_wire, s.own, s.type, s.recv_count, s.rank, s.ranks, s.element, s.out, s.average);
}

Task run_after_peer_calls(Op& op, std::shared_ptr<const FlagSegment> flags, uint64_t parity, Fingerprint mine,
                          Task collective) {
  for (int p = 0; p < flags->size(); ++p) {
    if (p == flags->rank()) continue;
    Fingerprint theirs;
    FlagSegment::PeerCall seen = FlagSegment::PeerCall::kNotYet;
    // Stands for the operation's own bytes in a timeout or peer-loss report: the peer has not called it.
    co_await op.wait_until(p, op.context().bytes, [&] {  // p: a communicator rank, as the segment's index
      seen = flags->peer_call(p, parity, mine.seq, theirs);
      return seen != FlagSegment::PeerCall::kNotYet;
    });
    if (seen != FlagSegment::PeerCall::kMade || theirs == mine) continue;  // passed: it moved on, no word here
    ErrorContext ctx = op.context();
    ctx.peer = flags->endpoint(p);
    throw MismatchError(ctx, "collective mismatch: rank " + std::to_string(flags->rank()) + " called " +
                                 describe(mine) + " but rank " + std::to_string(p) + " called " + describe(theirs));
  }
  co_await collective;
}

Task run_checked(Op& op, Fingerprint mine, Task collective) {
  co_await exchange_fingerprints(op, mine);
  op.next_phase();
  co_await collective;
}

}  // namespace fsdp
