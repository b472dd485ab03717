// Reduce-scatter over shared-memory windows: rank r reads block r of every rank's input window and
// reduces it into `out` in one pass (n block reads, one block write per rank, nothing sent), then waits
// until the peers have read its input.
#include <memory_resource>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/window_reduce.h"
#include "collectives/algorithms/window_sync.h"

namespace fsdp {

Task reduce_scatter_window(Op& op, WindowSync& sync, std::byte* out, size_t recv_count, const ReductionPlan& plan) {
  const int n = op.size();
  const size_t block_bytes = recv_count * element_size(plan.user_type);
  std::pmr::vector<const std::byte*> inputs(static_cast<size_t>(n), &op.arena());
  for (int p = 0; p < n; ++p) inputs[p] = sync.read_of(p) + static_cast<size_t>(op.rank()) * block_bytes;
  reduce_from_windows(out, inputs, recv_count, plan,
                      op.scratch(kScratchWindowAcc, 2 * kWindowReduceChunk * plan.red.elem()), /*output_read_soon=*/false);
  co_await sync.phase_done(1);
}

}  // namespace fsdp
