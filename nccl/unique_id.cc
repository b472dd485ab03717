#include "nccl/unique_id.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "collectives/transports/tcp.h"
#include "collectives/types/errors.h"
#include "common/crc32c.h"
#include "common/job_secret.h"
#include "common/knobs.h"
#include "launch/host_address.h"
#include "launch/job_id.h"
#include "launch/store.h"
#include "nccl/errors.h"

namespace fsdp::nccl {
namespace {

constexpr char kMagic[8] = {'f', 's', 'd', 'p', 'N', 'C', 'C', 'L'};
constexpr uint8_t kLayoutVersion = 3;  // 3: the listener's secret
constexpr size_t kModeAt = 9, kPortAt = 10, kJobAt = 12, kSecretAt = 32, kHostAt = 48, kChecksumAt = 124;
static_assert(kJobAt + kIdMaxJobChars + 1 == kSecretAt && kSecretAt + kIdSecretBytes == kHostAt);
static_assert(kHostAt + kIdMaxHostChars + 1 == kChecksumAt && kChecksumAt + 4 == sizeof(ncclUniqueId::internal));

uint32_t checksum_of(const ncclUniqueId& raw) { return crc32c(raw.internal, kChecksumAt); }

uint32_t stored_checksum(const ncclUniqueId& raw) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(raw.internal[kChecksumAt + i]);
  return v;
}

// This process's rendezvous listener: started by the first ncclGetUniqueId, serving until exit.
struct Listener {
  std::mutex mu;
  std::unique_ptr<launch::StoreServer> server;
  std::string host;    // what ids announce
  std::string secret;  // what its clients prove; carried in every id it hands out
  pid_t owner = 0;     // the process that started it

  // A child forked after the listener started has the object but not its thread: it must not join it.
  ~Listener() {
    if (server && ::getpid() != owner) (void)server.release();
  }
};

Listener& listener() {
  static Listener l;
  return l;
}

void put_string(ncclUniqueId& raw, size_t at, size_t max_chars, const std::string& s, const char* what) {
  if (s.size() > max_chars) {
    throw ApiError(ncclInvalidArgument, std::string(what) + " '" + s + "' is longer than the " +
                                            std::to_string(max_chars) + " characters an ncclUniqueId holds");
  }
  std::memcpy(raw.internal + at, s.data(), s.size());
}

std::string get_string(const ncclUniqueId& raw, size_t at, size_t max_chars) {
  const char* p = raw.internal + at;
  const size_t n = ::strnlen(p, max_chars + 1);
  if (n > max_chars) throw ApiError(ncclInvalidArgument, "corrupt ncclUniqueId: unterminated field");
  return std::string(p, n);
}

}  // namespace

ncclUniqueId encode(const UniqueId& id) {
  ncclUniqueId raw;
  std::memset(&raw, 0, sizeof(raw));
  std::memcpy(raw.internal, kMagic, sizeof(kMagic));
  raw.internal[8] = static_cast<char>(kLayoutVersion);
  raw.internal[kModeAt] = static_cast<char>(id.mode);
  raw.internal[kPortAt] = static_cast<char>(id.port & 0xff);
  raw.internal[kPortAt + 1] = static_cast<char>(id.port >> 8);
  put_string(raw, kJobAt, kIdMaxJobChars, id.job, "job id");
  put_string(raw, kHostAt, kIdMaxHostChars, id.host, "host");
  if (!id.secret.empty()) {
    if (id.secret.size() != kIdSecretBytes) {
      throw ApiError(ncclInternalError, "an ncclUniqueId secret of " + std::to_string(id.secret.size()) + " bytes");
    }
    std::memcpy(raw.internal + kSecretAt, id.secret.data(), kIdSecretBytes);
  }
  const uint32_t sum = checksum_of(raw);
  for (int i = 0; i < 4; ++i) raw.internal[kChecksumAt + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  return raw;
}

UniqueId decode(const ncclUniqueId& raw) {
  if (std::memcmp(raw.internal, kMagic, sizeof(kMagic)) != 0) {
    throw ApiError(ncclInvalidArgument,
                   "the ncclUniqueId was not made by ncclGetUniqueId of this library (wrong magic: uninitialized, "
                   "corrupted in transit, or from another NCCL implementation)");
  }
  if (static_cast<uint8_t>(raw.internal[8]) != kLayoutVersion) {
    throw ApiError(ncclInvalidArgument, "the ncclUniqueId has layout version " +
                                            std::to_string(static_cast<uint8_t>(raw.internal[8])) + ", this library reads " +
                                            std::to_string(kLayoutVersion) + ": mixed library versions in one job");
  }
  if (checksum_of(raw) != stored_checksum(raw)) {
    throw ApiError(ncclInvalidArgument,
                   "corrupt ncclUniqueId: checksum mismatch (the 128 bytes changed between ncclGetUniqueId and "
                   "this call: a partial or wrong-buffer broadcast?)");
  }
  UniqueId id;
  const auto mode = static_cast<uint8_t>(raw.internal[kModeAt]);
  if (mode != static_cast<uint8_t>(IdMode::kCallerServes) && mode != static_cast<uint8_t>(IdMode::kRankZeroServes)) {
    throw ApiError(ncclInvalidArgument, "corrupt ncclUniqueId: unknown mode " + std::to_string(mode));
  }
  id.mode = static_cast<IdMode>(mode);
  id.port = static_cast<uint16_t>(static_cast<uint8_t>(raw.internal[kPortAt]) |
                                  (static_cast<uint8_t>(raw.internal[kPortAt + 1]) << 8));
  id.job = get_string(raw, kJobAt, kIdMaxJobChars);
  id.host = get_string(raw, kHostAt, kIdMaxHostChars);
  const std::string secret(raw.internal + kSecretAt, kIdSecretBytes);
  if (secret != std::string(kIdSecretBytes, '\0')) id.secret = secret;
  if (id.port == 0 || id.host.empty() || id.job.empty()) {
    throw ApiError(ncclInvalidArgument, "corrupt ncclUniqueId: no store address or job id");
  }
  return id;
}

UniqueId new_unique_id() {
  UniqueId id;
  const std::string comm_id = knobs::kNcclCommId.get();
  if (!comm_id.empty()) {
    TcpEndpoint at;
    try {
      at = TcpEndpoint::parse(comm_id);
    } catch (const InvalidArgument& e) {
      throw ApiError(ncclInvalidArgument, "NCCL_COMM_ID='" + comm_id + "' is not host:port (" + e.what() + ")");
    }
    id.mode = IdMode::kRankZeroServes;
    id.host = at.host;
    id.port = at.port;
    // Every rank computes the same id; rank 0's store is fresh for each communicator.
    id.job = "commid";
    return id;
  }
  Listener& l = listener();
  std::lock_guard<std::mutex> lock(l.mu);
  if (!l.server) {
    std::string host = knobs::kNcclHost.get();
    if (host.empty()) host = launch::first_external_address();
    if (host.empty()) host = "127.0.0.1";
    l.secret = random_bytes(kIdSecretBytes);
    launch::StoreServerOptions options = launch::StoreServerOptions::from_env();
    options.secret = l.secret;
    l.server = std::make_unique<launch::StoreServer>(launch::is_loopback(host) ? host : "0.0.0.0", 0, options);
    l.host = host;
    l.owner = ::getpid();
    debug_info("rendezvous listener serving on " + l.server->address() + ", announced as " + host + ":" +
               std::to_string(l.server->port()));
  }
  id.mode = IdMode::kCallerServes;
  id.host = l.host;
  id.port = l.server->port();
  id.job = launch::random_job_id();
  id.secret = l.secret;
  return id;
}

}  // namespace fsdp::nccl
