// Communicator knobs. Defaults here; every one can be set by an FSDP_* environment variable
// (from_env) and by the API. docs/config.md lists them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace fsdp {

struct CommOptions {
  // How long one operation may wait on its peers before failing with TimeoutError. FSDP_TIMEOUT_SEC.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Messages below this many bytes (per rank's full buffer) use the latency-optimised algorithms
  // (recursive doubling, Bruck, binomial trees); larger ones the bandwidth-optimal rings.
  // FSDP_SMALL_MSG_BYTES.
  size_t small_message_bytes = 64 * 1024;
  // Pipelining unit of the ring algorithms: a chunk is forwarded as soon as it arrived, and reduced
  // while it is still in cache. FSDP_CHUNK_BYTES.
  size_t chunk_bytes = 512 * 1024;
  // Forces algorithms by collective, e.g. "all_reduce=ring,all_gather=bruck". FSDP_ALGO.
  std::string algorithms;

  // Defaults overridden by whatever FSDP_* variables are set. Throws InvalidArgument on a malformed value.
  static CommOptions from_env();
};

}  // namespace fsdp
