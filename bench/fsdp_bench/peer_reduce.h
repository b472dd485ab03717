// Element-wise reductions for the peer libraries' user-defined operators (Open MPI's MPI_Op_create,
// Gloo's reduction functions), which know no 16- or 8-bit floats: x[i] = x[i] op y[i] in type t,
// where 16- and 8-bit floats are widened to f32, combined and rounded back at every step (the
// peers' only option; the check's inputs are exact, so every order agrees with ours).
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "collectives/types/reduce_op.h"

namespace fsdp::bench {

// kind is kSum, kProd, kMax or kMin.
void reduce_elements(void* x, const void* y, size_t n, DataType t, ReduceKind kind);

// The average's last step, as the library does it: divide by n in the accumulate type and round once.
void divide_elements(void* x, size_t n, DataType t, int divisor);

// A plain function pointer per (type, kind), for APIs that take no closure. F is instantiated as
// F::template fn<T, K> for each pair; returns F's value for (t, kind).
template <typename F>
auto dispatch_reduction(DataType t, ReduceKind kind) {
  auto by_kind = [&]<DataType T>() {
    switch (kind) {
      case ReduceKind::kProd: return F::template fn<T, ReduceKind::kProd>();
      case ReduceKind::kMax: return F::template fn<T, ReduceKind::kMax>();
      case ReduceKind::kMin: return F::template fn<T, ReduceKind::kMin>();
      default: return F::template fn<T, ReduceKind::kSum>();
    }
  };
  switch (t) {
    case DataType::kInt8: return by_kind.template operator()<DataType::kInt8>();
    case DataType::kUint8: return by_kind.template operator()<DataType::kUint8>();
    case DataType::kInt32: return by_kind.template operator()<DataType::kInt32>();
    case DataType::kUint32: return by_kind.template operator()<DataType::kUint32>();
    case DataType::kInt64: return by_kind.template operator()<DataType::kInt64>();
    case DataType::kUint64: return by_kind.template operator()<DataType::kUint64>();
    case DataType::kFloat16: return by_kind.template operator()<DataType::kFloat16>();
    case DataType::kFloat64: return by_kind.template operator()<DataType::kFloat64>();
    case DataType::kBfloat16: return by_kind.template operator()<DataType::kBfloat16>();
    case DataType::kFloat8E4M3: return by_kind.template operator()<DataType::kFloat8E4M3>();
    case DataType::kFloat8E5M2: return by_kind.template operator()<DataType::kFloat8E5M2>();
    default: return by_kind.template operator()<DataType::kFloat32>();
  }
}

}  // namespace fsdp::bench
