#include "collectives/core/op_pool.h"

#include <thread>

namespace fsdp {

std::shared_ptr<OpPool> OpPool::create(Transport& transport, ScratchPool& scratch, size_t max_idle) {
  return std::shared_ptr<OpPool>(new OpPool(transport, scratch, max_idle));
}

OpPool::OpPool(Transport& transport, ScratchPool& scratch, size_t max_idle)
    : transport_(transport), scratch_(scratch), max_idle_(max_idle) {}

OpPool::~OpPool() {
  for (Op* list : {local_, returned_.take_all()}) {
    while (list) delete std::exchange(list, list->next_idle);
  }
}

OpPtr OpPool::acquire(ErrorContext ctx, const GroupView& group, size_t chunk_bytes, Clock::duration timeout) {
  while (acquiring_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  struct Turn {
    std::atomic<bool>& flag;
    ~Turn() { flag.store(false, std::memory_order_release); }
  } turn{acquiring_};
  if (!local_) local_ = returned_.take_all();
  Op* op = local_;
  if (op) {
    local_ = op->next_idle;
    idle_.fetch_sub(1, std::memory_order_relaxed);
  } else {
    op = new Op(transport_, scratch_);
    created_.fetch_add(1, std::memory_order_relaxed);
  }
  op->begin(std::move(ctx), group, chunk_bytes, timeout);
  // Should the control block's allocation throw, shared_ptr hands the Op to the deleter itself.
  return OpPtr(op, GiveBack{shared_from_this()}, PoolAllocator<Op>(control_blocks_));
}

void OpPool::give_back(Op* op) noexcept {
  op->recycle();
  if (idle_.fetch_add(1, std::memory_order_relaxed) >= max_idle_) {
    idle_.fetch_sub(1, std::memory_order_relaxed);
    delete op;
    return;
  }
  returned_.push(op);
}

}  // namespace fsdp
