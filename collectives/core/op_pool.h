// The operations of one communicator, reused. An Op comes back here when its last OpPtr goes (the
// caller's Work, the engine's queue, the communicator's last-ordered reference; on whichever thread
// drops it last), keeping its arena, request lists and shared_ptr control block for the next call,
// so a collective in steady state makes no heap call for its Op or its coroutines.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "collectives/core/op.h"
#include "common/block_pool.h"

namespace fsdp {

class OpPool : public std::enable_shared_from_this<OpPool> {
 public:
  // At most `max_idle` idle Ops are kept (a burst of asynchronous calls leaves no more behind).
  static std::shared_ptr<OpPool> create(Transport& transport, ScratchPool& scratch, size_t max_idle = 16);

  // An Op ready for one operation (Op::begin done).
  OpPtr acquire(ErrorContext ctx, const GroupView& group, size_t chunk_bytes, Clock::duration timeout);

  // Ops made (not reused) so far; tests check that steady state makes none.
  size_t created() const;

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
  std::shared_ptr<BlockPool> control_blocks_ = std::make_shared<BlockPool>();
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Op>> idle_;
  size_t created_ = 0;
};

}  // namespace fsdp
