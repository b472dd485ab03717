#include "collectives/core/op_pool.h"

namespace fsdp {

std::shared_ptr<OpPool> OpPool::create(Transport& transport, ScratchPool& scratch, size_t max_idle) {
  return std::shared_ptr<OpPool>(new OpPool(transport, scratch, max_idle));
}

OpPool::OpPool(Transport& transport, ScratchPool& scratch, size_t max_idle)
    : transport_(transport), scratch_(scratch), max_idle_(max_idle) {
  idle_.reserve(max_idle_);
}

OpPtr OpPool::acquire(ErrorContext ctx, const GroupView& group, size_t chunk_bytes, Clock::duration timeout) {
  std::unique_ptr<Op> op;
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      op = std::move(idle_.back());
      idle_.pop_back();
    } else {
      ++created_;
    }
  }
  if (!op) op = std::make_unique<Op>(transport_, scratch_);
  op->begin(std::move(ctx), group, chunk_bytes, timeout);
  // Should the control block's allocation throw, shared_ptr hands the Op to the deleter itself.
  return OpPtr(op.release(), GiveBack{shared_from_this()}, PoolAllocator<Op>(control_blocks_));
}

void OpPool::give_back(Op* op) noexcept {
  op->recycle();
  {
    std::lock_guard lock(mu_);
    if (idle_.size() < max_idle_) {
      idle_.emplace_back(op);  // capacity reserved: no allocation, no throw
      return;
    }
  }
  delete op;
}

size_t OpPool::created() const {
  std::lock_guard lock(mu_);
  return created_;
}

}  // namespace fsdp
