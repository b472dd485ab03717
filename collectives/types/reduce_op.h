// Reduction operators. Kind values match NCCL's ncclRedOp_t for the built-in ops; premul-sum carries
// its scalar (each input is multiplied by it before the sum), as ncclRedOpCreatePreMulSum does.
#pragma once

#include <string_view>

namespace fsdp {

enum class ReduceKind : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4, kPremulSum = 5 };
inline constexpr int kNumReduceKinds = 6;

struct ReduceOp {
  ReduceKind kind = ReduceKind::kSum;
  double scalar = 1.0;  // only read for kPremulSum

  static ReduceOp sum() { return {ReduceKind::kSum, 1.0}; }
  static ReduceOp premul_sum(double s) { return {ReduceKind::kPremulSum, s}; }
};

inline bool operator==(const ReduceOp& a, const ReduceOp& b) { return a.kind == b.kind && a.scalar == b.scalar; }

std::string_view name(ReduceKind k);  // "sum", "prod", "max", "min", "avg", "premulsum"
bool is_valid(ReduceKind k);

}  // namespace fsdp
