// What the 128 bytes of an ncclUniqueId carry, and the rendezvous listener ncclGetUniqueId starts.
//
// Layout (all ranks share one architecture, like NCCL's own id):
//   [0, 8)    magic "fsdpNCCL"           [8]  layout version (3)      [9]  mode (IdMode)
//   [10, 12)  store port, little endian  [12, 32) job id, NUL-terminated
//   [32, 48)  the listener's secret (kCallerServes): whoever holds the id may join, as in NCCL, and
//             nobody else: the store and the TCP handshakes prove it (docs/architecture.md,
//             "Authentication"). All zero under NCCL_COMM_ID: then FSDP_JOB_SECRET, if any
//   [48, 124) store host (numeric address or name), NUL-terminated
//   [124, 128) CRC32C of bytes [0, 124), little endian: an id damaged on its way from rank 0 (a short
//              MPI_Bcast, a wrong buffer) is refused before anything in it is used
//
// The job id namespaces the store keys ("nccl/<job>/..."), so one listener serves any number of
// communicators, created one after another or at the same time.
#pragma once

#include <cstdint>
#include <string>

#include "nccl/api.h"

namespace fsdp::nccl {

enum class IdMode : uint8_t {
  // The process that called ncclGetUniqueId serves the store for as long as it lives (NCCL's pattern:
  // rank 0 makes the id and sends it to the others by MPI_Bcast or any other channel).
  kCallerServes = 1,
  // NCCL_COMM_ID=host:port was set: nobody serves yet; rank 0 starts the store there in
  // ncclCommInitRank, so every rank may compute the id itself.
  kRankZeroServes = 2,
};

struct UniqueId {
  IdMode mode = IdMode::kCallerServes;
  std::string host;
  uint16_t port = 0;
  std::string job;
  std::string secret;  // kIdSecretBytes raw bytes, or empty (NCCL_COMM_ID: the environment's, if any)
};

inline constexpr size_t kIdMaxJobChars = 19;
inline constexpr size_t kIdSecretBytes = 16;
inline constexpr size_t kIdMaxHostChars = 75;

// Throws ApiError(ncclInvalidArgument) when host or job do not fit.
ncclUniqueId encode(const UniqueId& id);
// Throws ApiError(ncclInvalidArgument) when the bytes are not an id made by ncclGetUniqueId (magic,
// version, checksum, fields), before any field is used.
UniqueId decode(const ncclUniqueId& raw);

// What ncclGetUniqueId returns: under NCCL_COMM_ID an id naming that address; otherwise a fresh job on
// this process's listener, started on first use. The id names FSDP_NCCL_HOST if set, else the first
// non-loopback IPv4 address that is up, else 127.0.0.1; the listener binds to that address when it
// is a loopback one, else to every interface (like a store named by MASTER_ADDR, docs/launch.md).
UniqueId new_unique_id();

}  // namespace fsdp::nccl
