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

namespace fsdp {

// memcpy with non-temporal stores (SSE2 where built for x86-64; memcpy elsewhere). No overlap.
void stream_copy(void* dst, const void* src, size_t bytes);
// stream_copy from FSDP_STREAM_COPY_BYTES (read once per process) up, memcpy below; null pointers
// with 0 bytes are fine.
void large_copy(void* dst, const void* src, size_t bytes);

// dst[i] = a[i] + b[i] in f32 with non-temporal stores (the windowed reduce-scatter of two ranks out of
// place: the output is written once and read by nobody soon). Bit-identical to reduce_pair's sum. dst
// overlaps neither input.
void stream_sum_f32(float* dst, const float* a, const float* b, size_t count);
// Whether a `bytes`-byte output is large enough to stream (FSDP_STREAM_COPY_BYTES).
bool worth_streaming(size_t bytes);

}  // namespace fsdp
