// Copies into a collective's output that are large enough to stream past the cache.
//
// A plain memcpy reads every destination line before writing it (read for ownership) and leaves the
// destination in cache, evicting what was there. For a 32 MiB block of a 64 MiB all-gather neither
// pays: the output outgrows the cache and is read by compute later, so the extra read is a third of
// the copy's memory traffic. Non-temporal stores write whole lines straight to memory. Measured
// (docs/benchmarks.md "Shared-memory windows"): the windowed all-gather at 64 MiB, 0.57x -> 0.8x of
// the half-memcpy bound out of place, 0.85x -> 0.95x of memcpy in place; no loss at 16 MiB.
#pragma once

#include <cstddef>
#include <span>

#include "collectives/types/gather_run.h"

namespace fsdp {

// memcpy with non-temporal stores (SSE2 where built for x86-64; memcpy elsewhere). No overlap.
void stream_copy(void* dst, const void* src, size_t bytes);

// The piece a ChunkedCopy's caller takes at a time: a few of them (one per rank's block) fit the L2
// cache (2 MiB a core on the machine measured). 64 KiB to 1 MiB measured alike at 2 ranks.
constexpr size_t kWindowCopyChunkBytes = size_t{256} << 10;

// A block copied front to back in pieces (streamed when the whole copy is worth it), for copies that
// run in step with others: the windowed all-gather copies chunk k of every rank's block at about the
// same time on every rank (collectives/algorithms/allgather_window.cc). The block lands contiguously at
// dst, or (rank p's block of an all-gather into runs, types/gather_run.h) scattered over its runs.
class ChunkedCopy {
 public:
  ChunkedCopy() = default;  // nothing to copy
  ChunkedCopy(std::byte* dst, const std::byte* src, size_t bytes);
  // Rank p's block of `block_bytes` at src, each run's piece to recv + run.dst + p * run.per_rank. The
  // runs outlive the copy.
  ChunkedCopy(std::byte* recv, const std::byte* src, size_t block_bytes, std::span<const GatherRun> runs, int p);

  // Copies the block's bytes [copied(), min(end, size)) (those of them in a run's piece); nothing where
  // that is empty.
  void copy_through(size_t end);
  bool finished() const { return copied_ == bytes_; }
  size_t copied() const { return copied_; }

 private:
  void copy(std::byte* dst, const std::byte* src, size_t bytes) const;

  std::byte* dst_ = nullptr;
  const std::byte* src_ = nullptr;
  size_t bytes_ = 0;
  size_t copied_ = 0;
  bool streamed_ = false;
  std::span<const GatherRun> runs_;  // empty: contiguous
  int rank_ = 0;
};

// dst[i] = a[i] + b[i] in f32 with non-temporal stores (the windowed reduce-scatter of two ranks out of
// place: the output is written once and read by nobody soon). Bit-identical to reduce_pair's sum. dst
// overlaps neither input.
void stream_sum_f32(float* dst, const float* a, const float* b, size_t count);
// Whether a `bytes`-byte output is large enough to stream (FSDP_STREAM_COPY_BYTES).
bool worth_streaming(size_t bytes);

}  // namespace fsdp
