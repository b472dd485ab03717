#include "collectives/quantized.h"

#include <algorithm>

#include "collectives/types/reduce_kernels.h"

namespace fsdp::mx {

Work start_all_gather(Communicator& comm, uint8_t* wire, size_t count) {
  const size_t slot = slot_bytes(count);
  return comm.all_gather(wire + comm.rank() * slot, wire, slot, DataType::kUint8);
}

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

void all_gather(Communicator& comm, const void* send, void* recv, size_t count, DataType type, Format format,
                std::vector<uint8_t>& wire) {
  const size_t slot = slot_bytes(count);
  wire.resize(slot * comm.size());
  quantize(send, type, count, wire.data() + comm.rank() * slot, format);
  start_all_gather(comm, wire.data(), count).wait();
  finish_all_gather(wire.data(), count, comm.size(), format.element, recv, type);
}

Work start_reduce_scatter(Communicator& comm, const void* send, DataType type, size_t recv_count, Format format,
                          uint8_t* send_wire, uint8_t* recv_wire) {
  const size_t slot = slot_bytes(recv_count);
  const auto* src = static_cast<const std::byte*>(send);
  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank()) continue;  // stays here at full precision
    quantize(src + r * recv_count * element_size(type), type, recv_count, send_wire + r * slot, format);
  }
  return comm.all_to_all(send_wire, recv_wire, slot, DataType::kUint8);
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

void reduce_scatter(Communicator& comm, const void* send, float* recv, size_t recv_count, DataType type,
                    Format format, bool average, std::vector<uint8_t>& wire) {
  const size_t half = slot_bytes(recv_count) * comm.size();
  wire.resize(2 * half);
  start_reduce_scatter(comm, send, type, recv_count, format, wire.data(), wire.data() + half).wait();
  const void* own = static_cast<const std::byte*>(send) + comm.rank() * recv_count * element_size(type);
  finish_reduce_scatter(wire.data() + half, own, type, recv_count, comm.rank(), comm.size(), format.element, recv,
                        average);
}

}  // namespace fsdp::mx
