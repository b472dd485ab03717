// Which algorithm a collective runs: forced by CommOptions::algorithms (FSDP_ALGO, e.g.
// "all_reduce=ring,all_gather=bruck"), else chosen by message size and host layout from the registry
// (algorithms.h): the latency-optimised algorithm below CommOptions::small_message_bytes, the
// bandwidth-optimal one above it, the hierarchical one for large messages across hosts.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "collectives/types/collective_kind.h"

namespace fsdp {

class AlgorithmChoice {
 public:
  // Throws InvalidArgument naming FSDP_ALGO for an entry that is not collective=algorithm or names an
  // algorithm the registry does not have (listing the collective's choices).
  explicit AlgorithmChoice(const std::string& spec);

  // True when the hierarchical algorithm should run: forced, or by default for large messages when the
  // ranks span hosts (and no other algorithm was forced).
  bool hierarchical(CollectiveKind collective, size_t bytes, size_t threshold, bool multi_host) const;
  // True when the latency-optimised algorithm should run.
  bool small(CollectiveKind collective, size_t bytes, size_t threshold) const;
  // The registry name of what runs when the hierarchical one does not ("ring", "bruck", ...). Throws
  // InvalidArgument for a collective the registry has no algorithm for (send, recv).
  std::string flat_name(CollectiveKind collective, size_t bytes, size_t threshold) const;

 private:
  std::map<CollectiveKind, std::string> forced_;
};

}  // namespace fsdp
