// Where the blocks of an all-gather land in its output. The plain all-gather puts rank p's block at
// recv + p * block_bytes. A caller whose output has another layout names runs instead, and the gather
// writes every piece where it belongs in the pass that fetches it: FSDP's copy-out (each parameter's
// rows from every rank, contiguous) fused into the all-gather.
//
// A run is one tensor sharded by rank (FSDP2's dim-0 chunks): its `total` bytes lie at recv + dst in
// rank order, rank p's piece of `per_rank` bytes at offset `src` of p's block. Pieces past `total` are
// padding (the last ranks' are shorter or empty) and are not written.
//
//   block of rank p:  [ ... | piece p of run r (per_rank bytes, at src) | ... ]
//   recv:             [ ... | run r: piece 0, piece 1, ..., piece n-1 (total bytes, at dst) | ... ]
#pragma once

#include <algorithm>
#include <cstddef>

namespace fsdp {

struct GatherRun {
  size_t src = 0;       // offset of the piece in every rank's block
  size_t dst = 0;       // offset of the tensor in recv
  size_t per_rank = 0;  // bytes of a whole piece
  size_t total = 0;     // bytes of the tensor: at most per_rank * ranks

  // The bytes of rank p's piece that are written: per_rank, less what lies past total.
  size_t piece(int p) const {
    const size_t at = static_cast<size_t>(p) * per_rank;
    return at >= total ? 0 : std::min(per_rank, total - at);
  }
};

}  // namespace fsdp
