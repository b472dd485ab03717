// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained: what the job's authentication
// (common/job_secret.h) needs, without linking a crypto library for 32-byte proofs over short
// challenges. A plain portable implementation: each handshake hashes a few hundred bytes, so speed
// does not matter here; do not use it for bulk data.
//
//   Digest mac = hmac_sha256(key, message);
//   if (!equal_constant_time(mac, received)) refuse();
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fsdp {

using Digest = std::array<uint8_t, 32>;

// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest finish();

 private:
  void block(const uint8_t* p);  // one 64-byte block into state_
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest sha256(std::string_view data);

// HMAC-SHA256 of `message` under `key` (any length; keys over 64 bytes are hashed first).
Digest hmac_sha256(std::string_view key, std::string_view message);

// True when a and b are equal, taking the same time whichever byte differs (no early exit), so a
// peer cannot learn a proof byte by byte from how fast it is refused.
bool equal_constant_time(const Digest& a, const Digest& b);

}  // namespace fsdp
