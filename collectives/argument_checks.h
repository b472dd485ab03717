// Argument checks shared by the collectives: each throws InvalidArgument naming the call, the rank and
// the value ("all_gather on rank 3: null send buffer with 4096 bytes"), before anything is sent.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "collectives/algorithms/blocks.h"
#include "collectives/types/collective_kind.h"
#include "collectives/types/errors.h"
#include "collectives/types/gather_run.h"
#include "collectives/types/reduce_op.h"
#include "common/dtype.h"

namespace fsdp {

struct Checker {
  CollectiveKind op;
  int rank;
  int size;

  [[noreturn]] void fail(const std::string& what) const;
  // count elements of t, times `multiple`, in bytes.
  size_t bytes(size_t count, DataType t, size_t multiple = 1) const;
  void buffer(const void* p, size_t bytes, const char* which) const;
  void reduce_op(ReduceOp r, DataType t) const;
  void root(int r) const;
  void peer(int p) const;
  // The byte blocks of an all_to_all_v buffer from per-rank element counts and displacements.
  PeerBlocks blocks(std::span<const size_t> counts, std::span<const size_t> displs, DataType t, const void* buf,
                    const char* which) const;
  // Bytes from the buffer's start to the end of its last block.
  static size_t extent(const PeerBlocks& b);
  // Receive blocks written by different peers must not overlap (ranks named), nor the send buffer.
  void disjoint_receives(const PeerBlocks& recv, const void* recv_buf, const PeerBlocks& send,
                         const void* send_buf) const;
  // An all-gather's runs (types/gather_run.h) over blocks of `block_bytes`: at least one, each piece
  // inside the block, no tensor longer than its pieces, whole elements of t, destinations disjoint.
  // Returns the bytes of recv they span.
  size_t runs(std::span<const GatherRun> runs, size_t block_bytes, DataType t) const;
  // `inner` must either not overlap `outer` or be exactly the slice at `slice_offset`.
  void in_place_layout(const void* outer, size_t outer_bytes, const void* inner, size_t inner_bytes,
                       size_t slice_offset, const char* what) const;
};

}  // namespace fsdp
