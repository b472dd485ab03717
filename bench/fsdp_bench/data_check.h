// Result checking (-c): every rank fills its inputs from a formula of (rank, element index), runs the
// collective once, and counts the elements of its result that differ from what the formula predicts.
//
// Data movers (all-gather, broadcast, sendrecv, alltoall) carry hash bytes unique to rank and index,
// compared bytewise, so a block landing one slot off fails at once. Reductions carry small integers
// (sum/avg 0..3, or 0..1 in fp8 e5m2; prod 1..2; max/min 0..15) that sum exactly in every type and
// order for up to 8 ranks, so any algorithm (ring, tree, MPI's, Gloo's) must give bitwise the result:
// the exact combination, averaged in the accumulate type (f32 for 16- and 8-bit floats) and rounded
// once to the type, integers wrapping.
#pragma once

#include <cstddef>

#include "bench/fsdp_bench/collective.h"
#include "common/dtype.h"
#include "collectives/types/reduce_op.h"

namespace fsdp::bench {

struct Case {
  Collective collective;
  DataType type;
  ReduceKind op;  // ignored by data movers
  int root;
};

// Fills the buffers for one checked run. In place, `send` points into `recv` (all-gather) or `recv`
// into `send` (reduce-scatter), or they are equal; whatever the rank does not provide is poisoned.
void prepare_check(const Case& c, const Geometry& g, int rank, int nranks, bool in_place, std::byte* send,
                   std::byte* recv);

// How many result elements are wrong on this rank. `result` is where the backend left the result
// (the receive buffer, or for an in-place reduce-scatter the start of this rank's block). A rank
// that receives nothing (reduce off the root) has no wrong elements.
size_t count_wrong(const Case& c, const Geometry& g, int rank, int nranks, const std::byte* result);

// Element count this rank's result has (0 off the root of a reduce).
size_t result_count(const Case& c, const Geometry& g, int rank);

}  // namespace fsdp::bench
