// The operations of one communicator, reused. An Op comes back here when its last OpPtr goes (the
// caller's Work, the engine's queue, the communicator's last-ordered reference; on whichever thread
// drops it last), keeping its arena, request lists and shared_ptr control block for the next call,
// so a collective in steady state makes no heap call for its Op or its coroutines.
//
// No lock: an Op comes back by one compare-and-swap onto a shared list; acquire pops a private list
// and refills it from the shared one with one exchange (the scheme of common/block_pool.h). That needs
// one acquiring thread at a time: a communicator's calls are meant to be ordered, but a front end may
// let threads race (c10d used from several threads, an NCCL group running its actions in parallel),
// so a flag (one exchange, uncontended) makes them take turns rather than share an Op.
#pragma once

#include <atomic>
#include <memory>

#include "collectives/core/op.h"
#include "common/block_pool.h"

namespace fsdp {

class OpPool : public std::enable_shared_from_this<OpPool> {
 public:
  // At most about `max_idle` idle Ops are kept (a burst of asynchronous calls leaves no more behind).
  static std::shared_ptr<OpPool> create(Transport& transport, ScratchPool& scratch, size_t max_idle = 16);
  ~OpPool();

  // An Op ready for one operation (Op::begin done).
  OpPtr acquire(ErrorContext ctx, const GroupView& group, size_t chunk_bytes, Clock::duration timeout);

  // Ops made (not reused) so far; tests check that steady state makes none.
  size_t created() const { return created_.load(std::memory_order_relaxed); }

 private:
  OpPool(Transport& transport, ScratchPool& scratch, size_t max_idle);
  void give_back(Op* op) noexcept;

  // The OpPtr's deleter: recycles instead of deleting, and keeps the pool alive until it ran.
  struct GiveBack {
    std::shared_ptr<OpPool> pool;
    void operator()(Op* op) const noexcept { pool->give_back(op); }
  };

  Transport& transport_;
  ScratchPool& scratch_;
  const size_t max_idle_;
  std::shared_ptr<BlockPool> control_blocks_ = std::make_shared<BlockPool>(BlockPool::Sharing::kFreedAnywhere);
  Op* local_ = nullptr;               // the acquiring thread's idle Ops (linked by Op::next_idle)
  ReturnedList<Op, &Op::next_idle> returned_;  // recycled since, from any thread
  std::atomic<size_t> idle_{0};
  std::atomic<bool> acquiring_{false};  // acquire's turn: guards local_ and the control blocks' allocations
  std::atomic<size_t> created_{0};
};

}  // namespace fsdp
