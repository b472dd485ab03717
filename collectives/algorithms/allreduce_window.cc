// All-reduce over shared-memory windows, in two phases:
//   1. rank r reduces block r (Blocks: sizes differ by at most one element) of every rank's input
//      window into block r of its own output window;
//   2. once every rank finished phase 1 (no one reads inputs any more, in place included), rank r
//      copies block p from rank p's output window for every p != r, then waits until the peers
//      copied its block.
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/window_reduce.h"
#include "collectives/algorithms/window_sync.h"

namespace fsdp {

Task allreduce_window(Op& op, WindowSync& sync, size_t count, const ReductionPlan& plan) {
  const int n = op.size();
  const int r = op.rank();
  const Blocks blocks{count, n, element_size(plan.user_type)};
  std::pmr::vector<const std::byte*> inputs(static_cast<size_t>(n), &op.arena());
  for (int p = 0; p < n; ++p) inputs[p] = sync.read_of(p) + blocks.offset(r);
  reduce_from_windows(sync.result_of(r) + blocks.offset(r), inputs, blocks.count_of(r), plan,
                      op.scratch(kScratchWindowAcc, 2 * kWindowReduceChunk * plan.red.elem()), /*output_read_soon=*/true);
  co_await sync.phase_done(1);
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    copy_bytes(sync.result_of(r) + blocks.offset(p), sync.result_of(p) + blocks.offset(p), blocks.bytes(p));
  }
  co_await sync.phase_done(2);
}

}  // namespace fsdp
