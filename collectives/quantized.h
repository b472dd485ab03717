// MXFP8 on the wire (collectives/kernels/mxfp8.h): 8.25 bits per element instead of 16 (bf16) or 32
// (f32). Quantisation is for transport only: all-gathered values are decoded on arrival, and
// reduce-scattered contributions are decoded and summed in f32 (never in 8 bits).
//
// The collectives themselves are the communicator's (Communicator::all_gather / reduce_scatter with
// Wire::mxfp8): each rank's part travels as one flat wire slot of slot_bytes(count) =
// mx::wire_bytes(count) bytes (codes then scales), so one collective of bytes moves data and scales
// together. Here: the slots' layout and the encode and decode halves around the exchange.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/kernels/mxfp8.h"

namespace fsdp::mx {

inline size_t slot_bytes(size_t count) { return wire_bytes(count); }

// --- all-gather: `wire` holds `ranks` slots of `count` elements each ---
// Decodes the gathered slots into out (ranks * count elements, rank-major, kFloat32 or kBfloat16).
void finish_all_gather(const uint8_t* wire, size_t count, int ranks, DataType element, void* out, DataType out_type);
// Elements [first, first + n) of that rank-major output (slots of `count` elements) into out[0, n), with
// mx::dequantize_range's out_type / precision: a part of finish_all_gather, e.g. decoded straight into
// its final place (FSDP's copy-out) without a param-dtype buffer in between.
void decode_gathered(const uint8_t* wire, size_t count, size_t first, size_t n, DataType element, void* out,
                     DataType out_type, DataType precision);

// --- reduce-scatter: `send` holds `ranks` chunks of recv_count elements (kFloat32 or kBfloat16); chunk j
// is quantised for rank j into send_wire and exchanged by one all-to-all into recv_wire (both `ranks`
// slots). Pairwise exchange, not a ring: every contribution is quantised exactly once, and this rank's
// own chunk, which never travels, not at all. ---
// Quantises every chunk but this rank's into its slot of send_wire.
void start_reduce_scatter(const void* send, DataType type, size_t recv_count, int rank, int ranks, Format format,
                          uint8_t* send_wire);
// out[i] = own[i] (this rank's chunk of send, exact), then plus every other rank's decoded contribution in
// rank order, in f32 (so a reference gets the same bits); divided by `ranks` when average. out may be own.
void finish_reduce_scatter(const uint8_t* recv_wire, const void* own, DataType type, size_t recv_count, int rank,
                           int ranks, DataType element, float* out, bool average);

}  // namespace fsdp::mx
