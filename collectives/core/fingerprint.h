// Collective fingerprints: what every rank of a communicator must agree on for one collective, and
// the exchange that checks it before the collective runs (CommOptions::check_collectives,
// FSDP_CHECK_COLLECTIVES=1; off by default, then nothing here runs).
//
// Without the check, mismatched calls fail late or not at all: all-reduce on one rank and all-gather
// on another wait until the timeout; 1000 floats against 500 doubles (the same bytes) or sum against
// max "succeed" with wrong data. With it, every rank all-gathers the 32-byte fingerprints first
// (Bruck, ceil(log2 n) rounds) and, on any difference, every rank fails the operation at once with
// the same MismatchError naming rank 0's fingerprint and the first rank that differs from it
// (exchange_fingerprints, collectives/algorithms/algorithms.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "collectives/types/collective_kind.h"
#include "collectives/types/reduce_op.h"
#include "common/dtype.h"

namespace fsdp {

// One collective as every rank must call it. Fields that do not apply stay -1.
struct Fingerprint {
  uint64_t seq = 0;     // the communicator's operation sequence number
  uint64_t count = 0;   // elements per rank as the call takes them (0 for a barrier)
  int32_t op = -1;      // CollectiveKind
  int32_t dtype = -1;   // DataType
  int32_t root = -1;    // broadcast, reduce
  int32_t reduce = -1;  // ReduceKind of reductions

  static Fingerprint of(CollectiveKind collective, uint64_t seq, uint64_t count = 0, int dtype = -1, int root = -1,
                        int reduce = -1);
  bool operator==(const Fingerprint&) const = default;
};
static_assert(sizeof(Fingerprint) == 32, "fingerprints travel as 32 raw bytes");

// "all_reduce(count 1048576, float32, sum) seq 17".
std::string describe(const Fingerprint& f);

// Among every rank's fingerprint (`all`, by rank), the first rank whose call differs from rank 0's,
// or -1; with `text` "collective mismatch: rank 0 called X but rank R called Y".
int first_mismatch(std::span<const Fingerprint> all, std::string& text);

}  // namespace fsdp
