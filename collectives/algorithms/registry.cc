#include "collectives/algorithms/algorithms.h"

namespace fsdp {

const std::vector<AlgorithmInfo>& algorithm_registry() {
  static const std::vector<AlgorithmInfo> registry = {
      {"all_gather", "bruck", "ceil(log2 n) steps, (n-1)/n of the buffer per rank", true},
      {"all_gather", "ring", "n-1 chunk-pipelined steps, (n-1)/n of the buffer per rank", false},
      {"all_gather", "hierarchical", "intra-host to rails, rails across hosts (1/L of the buffer), back", false},
      {"reduce_scatter", "recursive_doubling", "all-reduce in log2 n steps, keep own block", true},
      {"reduce_scatter", "ring", "n-1 chunk-pipelined steps, (n-1)/n of the buffer per rank", false},
      {"reduce_scatter", "hierarchical", "intra-host sums at rails, partials across hosts, blocks back", false},
      {"all_reduce", "recursive_doubling", "log2 n steps of the whole buffer", true},
      {"all_reduce", "ring", "reduce-scatter + all-gather rings, 2(n-1)/n of the buffer per rank", false},
      {"all_reduce", "hierarchical", "hierarchical reduce-scatter + all-gather", false},
      {"broadcast", "binomial", "ceil(log2 n) rounds of the whole buffer", true},
      {"broadcast", "scatter_allgather", "scatter from root + ring all-gather", false},
      {"reduce", "binomial", "ceil(log2 n) rounds of the whole buffer", true},
      {"reduce", "ring", "ring reduce-scatter + gather to root", false},
      {"all_to_all", "bruck", "ceil(log2 n) rounds of about half the buffer, equal blocks", true},
      {"all_to_all", "pairwise", "n-1 direct exchanges, (n-1)/n of the buffer per rank", false},
      // Per-rank sizes differ in all_to_all_v, so a size-based choice could differ between ranks: one algorithm.
      {"all_to_all_v", "pairwise", "n-1 direct exchanges of each pair's own counts", false},
      {"barrier", "dissemination", "ceil(log2 n) rounds of empty messages", true},
  };
  return registry;
}

}  // namespace fsdp
