// Hierarchical all-reduce: the hierarchical reduce-scatter leaves each rank its reduced block, then
// the hierarchical all-gather spreads the blocks (2/L of the buffer over the network per rank, where
// the flat ring sends 2(n-1)/n of it through every link, inter-host ones included).
#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/host_layout.h"

namespace fsdp {

Task allreduce_hierarchical(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red,
                            const HostLayout& layout) {
  const Blocks blocks{count, op.size(), red.elem()};
  co_await reduce_scatter_hierarchical(op, in, out + blocks.offset(op.rank()), blocks, red, layout);
  op.next_phase();
  co_await allgather_hierarchical(op, out, blocks, layout);
}

}  // namespace fsdp
