// Ring all-reduce: a ring reduce-scatter leaves each rank one reduced block of `out`, and a ring
// all-gather spreads them. Each rank sends 2(n-1)/n of the buffer: bandwidth-optimal.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task allreduce_ring(Op& op, const std::byte* in, std::byte* out, size_t count, Reduction red) {
  const Blocks blocks{count, op.size(), red.elem()};
  co_await reduce_scatter_ring(op, in, out + blocks.offset(op.rank()), blocks, red);
  op.next_phase();
  co_await allgather_ring(op, out, blocks);
}

}  // namespace fsdp
