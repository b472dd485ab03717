#include "collectives/algorithms/algorithms.h"

namespace fsdp {

const std::vector<AlgorithmInfo>& algorithm_registry() {
  using C = CollectiveKind;
  static const std::vector<AlgorithmInfo> registry = {
      {C::kAllGather, "bruck", "ceil(log2 n) steps, (n-1)/n of the buffer per rank", true},
      {C::kAllGather, "ring", "n-1 chunk-pipelined steps, (n-1)/n of the buffer per rank", false},
      {C::kAllGather, "hierarchical", "intra-host to rails, rails across hosts (1/L of the buffer), back", false},
      {C::kReduceScatter, "recursive_doubling", "all-reduce in log2 n steps, keep own block", true},
      {C::kReduceScatter, "ring", "n-1 chunk-pipelined steps, (n-1)/n of the buffer per rank", false},
      {C::kReduceScatter, "hierarchical", "intra-host sums at rails, partials across hosts, blocks back", false},
      {C::kAllReduce, "recursive_doubling", "log2 n steps of the whole buffer", true},
      {C::kAllReduce, "ring", "reduce-scatter + all-gather rings, 2(n-1)/n of the buffer per rank", false},
      {C::kAllReduce, "hierarchical", "hierarchical reduce-scatter + all-gather", false},
      {C::kBroadcast, "binomial", "ceil(log2 n) rounds of the whole buffer", true},
      {C::kBroadcast, "scatter_allgather", "scatter from root + ring all-gather", false},
      {C::kReduce, "binomial", "ceil(log2 n) rounds of the whole buffer", true},
      {C::kReduce, "ring", "ring reduce-scatter + gather to root", false},
      {C::kAllToAll, "bruck", "ceil(log2 n) rounds of about half the buffer, equal blocks", true},
      {C::kAllToAll, "pairwise", "n-1 direct exchanges, (n-1)/n of the buffer per rank", false},
      // Per-rank sizes differ in all_to_all_v, so a size-based choice could differ between ranks: one algorithm.
      {C::kAllToAllV, "pairwise", "n-1 direct exchanges of each pair's own counts", false},
      {C::kBarrier, "dissemination", "ceil(log2 n) rounds of empty messages", true},
  };
  return registry;
}

}  // namespace fsdp
