#include "collectives/quantized.h"

#include <algorithm>

#include "collectives/kernels/reduce_kernels.h"

namespace fsdp::mx {

void finish_all_gather(const uint8_t* wire, size_t count, int ranks, DataType element, void* out, DataType out_type) {
  decode_gathered(wire, count, 0, count * static_cast<size_t>(ranks), element, out, out_type, out_type);
}

void decode_gathered(const uint8_t* wire, size_t count, size_t first, size_t n, DataType element, void* out,
                     DataType out_type, DataType precision) {
  if (count == 0) return;
  const size_t slot = slot_bytes(count);
  auto* dst = static_cast<std::byte*>(out);
  for (size_t at = first, end = first + n; at < end;) {  // one slot's part at a time
    const size_t r = at / count, in_slot = at - r * count;
    const size_t m = std::min(count - in_slot, end - at);
    dequantize_range(wire + r * slot, count, in_slot, m, element, dst + (at - first) * element_size(out_type), out_type,
                     precision);
    at += m;
  }
}

void start_reduce_scatter(const void* send, DataType type, size_t recv_count, int rank, int ranks, Format format,
                          uint8_t* send_wire) {
  const size_t slot = slot_bytes(recv_count);
  const auto* src = static_cast<const std::byte*>(send);
  for (int r = 0; r < ranks; ++r) {
    if (r == rank) continue;  // stays here at full precision
    quantize(src + r * recv_count * element_size(type), type, recv_count, send_wire + r * slot, format);
  }
}

void finish_reduce_scatter(const uint8_t* recv_wire, const void* own, DataType type, size_t recv_count, int rank,
                           int ranks, DataType element, float* out, bool average) {
  const size_t slot = slot_bytes(recv_count);
  if (own != out) widen_to_f32(out, own, recv_count, type, 1.0);
  for (int r = 0; r < ranks; ++r) {
    if (r != rank) dequantize_add(recv_wire + r * slot, recv_count, element, out);
  }
  if (average) divide_in_place(out, recv_count, DataType::kFloat32, ranks);
}

}  // namespace fsdp::mx
