// All-gather and reduce-scatter with MXFP8 on the wire (Wire::mxfp8): the arguments' checks, the
// quantisation at the call, and the exchange of wire slots (collectives/quantized.h).
#include "collectives/argument_checks.h"
#include "collectives/communicator_impl.h"
#include "collectives/dispatch.h"
#include "collectives/quantized.h"

namespace fsdp {
namespace {

void check_mxfp8_type(const Checker& check, DataType type) {
  if (type != DataType::kFloat32 && type != DataType::kBfloat16) {
    check.fail("mxfp8 on the wire takes float32 or bfloat16 data, not " + std::string(name(type)));
  }
}

}  // namespace

Work Communicator::all_gather(const void* send, void* recv, size_t count, DataType type, const Wire& wire) {
  if (wire.precision == WirePrecision::kMxfp8) return all_gather_mxfp8(send, recv, count, type, wire);
  return all_gather(send, recv, count, type);
}

Work Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                                  const Wire& wire) {
  if (wire.precision == WirePrecision::kMxfp8) return reduce_scatter_mxfp8(send, recv, recv_count, type, op, wire);
  return reduce_scatter(send, recv, recv_count, type, op);
}

Work Communicator::all_gather_mxfp8(const void* send, void* recv, size_t count, DataType type, const Wire& wire) {
  Checker check{CollectiveKind::kAllGather, rank(), size()};
  const size_t block = check.bytes(count, type);
  check_mxfp8_type(check, type);
  const size_t slot = mx::slot_bytes(count);
  check.buffer(recv, slot * size(), "recv");
  uint8_t* mine = static_cast<uint8_t*>(recv) + rank() * slot;
  if (send != mine) {  // else the slot holds this rank's part quantised already
    check.buffer(send, block, "send");
    check.in_place_layout(recv, slot * size(), send, block, rank() * slot, "send is not this rank's slot of recv");
    mx::quantize(send, type, count, mine, wire.format);
  }
  return all_gather(mine, recv, slot, DataType::kUint8);
}

Work Communicator::reduce_scatter_mxfp8(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp rop,
                                        const Wire& wire) {
  Checker check{CollectiveKind::kReduceScatter, rank(), size()};
  const size_t block = check.bytes(recv_count, type);
  const size_t total = check.bytes(recv_count, type, size());
  check.reduce_op(rop, type);
  check_mxfp8_type(check, type);
  if (rop.kind != ReduceKind::kSum && rop.kind != ReduceKind::kAvg) {
    check.fail("mxfp8 on the wire sums or averages, not " + std::string(name(rop.kind)));
  }
  check.buffer(send, total, "send");
  check.buffer(recv, recv_count * sizeof(float), "recv");
  const void* own = static_cast<const std::byte*>(send) + rank() * block;
  const bool in_place = recv == own && type == DataType::kFloat32;
  if (!in_place && overlaps(send, total, recv, recv_count * sizeof(float))) {
    check.fail("buffers overlap but recv is not this rank's chunk of a float32 send");
  }
  const size_t slot = mx::slot_bytes(recv_count), slots = slot * size();
  check.buffer(wire.scratch, 2 * slots, "wire scratch");
  mx::start_reduce_scatter(send, type, recv_count, rank(), size(), wire.format, wire.scratch);
  // The exchange is an all-to-all of the slots, as every rank's fingerprint and flight record show it.
  uint8_t* incoming = wire.scratch + slots;
  auto op = impl_->new_op(options_, CollectiveKind::kAllToAll, slots, false, impl_->next_seq++);
  Task exchange =
      run_all_to_all(*op, wire.scratch, incoming, slot, impl_->small(CollectiveKind::kAllToAll, slots, options_),
                     impl_->window_plan_all_to_all(wire.scratch, slots));
  const Mxfp8Sums sums{.recv_wire = incoming,
                       .own = own,
                       .type = type,
                       .recv_count = recv_count,
                       .rank = rank(),
                       .ranks = size(),
                       .element = wire.format.element,
                       .out = static_cast<float*>(recv),
                       .average = rop.kind == ReduceKind::kAvg};
  return impl_->submit_collective(op, run_then_sum_mxfp8(*op, std::move(exchange), sums), options_,
                                  CollectiveKind::kAllToAll, slot, static_cast<int>(DataType::kUint8));
}

}  // namespace fsdp
