// Communicator knobs: every one can be set by the API or by its FSDP_* environment variable
// (from_env); the defaults are the variables' (common/knobs.h). docs/config.md lists them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "common/knobs.h"

namespace fsdp {

struct CommOptions {
  // How long one operation may wait on its peers before failing with TimeoutError. FSDP_TIMEOUT_SEC.
  std::chrono::milliseconds timeout{static_cast<long long>(knobs::kTimeoutSec.fallback * 1000)};
  // Messages below this many bytes (per rank's full buffer) use the latency-optimised algorithms
  // (recursive doubling, Bruck, binomial trees); larger ones the bandwidth-optimal rings.
  // FSDP_SMALL_MSG_BYTES.
  size_t small_message_bytes = static_cast<size_t>(knobs::kSmallMsgBytes.fallback);
  // Collectives whose per-rank contribution is at most this many bytes (all-reduce, reduce: the
  // buffer; all-gather: the block; reduce-scatter: the whole input; broadcast; barrier), among ranks
  // that share memory, run through flags and slots in a shared segment instead of the progress engine
  // (collectives/flag_path.h). 0 turns it off; at most 4096. FSDP_FLAG_PATH_BYTES.
  size_t flag_path_bytes = static_cast<size_t>(knobs::kFlagPathBytes.fallback);
  // Pipelining unit of the ring algorithms: a chunk is forwarded as soon as it arrived, and reduced
  // while it is still in cache. FSDP_CHUNK_BYTES.
  size_t chunk_bytes = static_cast<size_t>(knobs::kChunkBytes.fallback);
  // Forces algorithms by collective, e.g. "all_reduce=ring,all_gather=bruck". FSDP_ALGO.
  std::string algorithms;
  // Exchange each collective's fingerprint (op, count, dtype, root, reduce op) before running it and
  // fail every rank at once on a mismatch (collectives/core/fingerprint.h). One extra latency-bound
  // round per collective when on. FSDP_CHECK_COLLECTIVES.
  bool check_collectives = false;

  // Defaults overridden by whatever FSDP_* variables are set. Throws InvalidArgument on a malformed value.
  static CommOptions from_env();
};

}  // namespace fsdp
