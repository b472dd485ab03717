#include "collectives/types/reduce_op.h"

namespace fsdp {

std::string_view name(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kProd: return "prod";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kMin: return "min";
    case ReduceKind::kAvg: return "avg";
    case ReduceKind::kPremulSum: return "premulsum";
  }
  return "invalid";
}

bool is_valid(ReduceKind k) {
  const int v = static_cast<int>(k);
  return v >= 0 && v < kNumReduceKinds;
}

}  // namespace fsdp
