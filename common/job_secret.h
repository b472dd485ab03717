// The job's shared secret and the challenge-response proofs built on it (docs/architecture.md,
// "Authentication"). Every rank of a job holds the same secret; a connection is admitted once the
// peer proved it knows the secret by an HMAC-SHA256 over a fresh random challenge, so the secret
// itself never travels and a recorded proof is worthless for the next connection.
//
//   JobSecret secret = job_secret_from_env();            // FSDP_JOB_SECRET or FSDP_JOB_SECRET_FILE
//   std::string nonce = random_bytes(kAuthNonceBytes);   // sent to the peer
//   Digest proof = auth_proof(secret.key, "fsdp-store client", nonce + their_nonce);
//
// Where it comes from: FSDP_JOB_SECRET (hex), FSDP_JOB_SECRET_FILE (a file holding the hex, readable
// by its owner only), or generated per job by fsdp-run and handed to its ranks in FSDP_JOB_SECRET.
// No secret at all: every proof is made with the empty key, which anyone can compute, so the
// handshakes still run but authenticate nothing (callers print a note where that matters).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/hmac_sha256.h"

namespace fsdp {

// Bytes of the random challenge each side of a handshake contributes.
inline constexpr size_t kAuthNonceBytes = 16;
// Shortest secret accepted: 128 bits.
inline constexpr size_t kMinSecretBytes = 16;
// What fsdp-run and the rendezvous file generate: 256 bits.
inline constexpr size_t kGeneratedSecretBytes = 32;

struct JobSecret {
  std::string key;     // raw bytes; empty: none configured (authentication off)
  std::string source;  // where it came from, for messages: "FSDP_JOB_SECRET", "FSDP_JOB_SECRET_FILE (/p)"
  bool empty() const { return key.empty(); }
};

// FSDP_JOB_SECRET or FSDP_JOB_SECRET_FILE (setting both is an error), else an empty secret. Read at
// every call (tests change the variables). Throws InvalidArgument naming the variable for text that
// is not hex, a secret under kMinSecretBytes, or a file that cannot be read or that its group or
// others may read or write (chmod 600 it).
JobSecret job_secret_from_env();
// The file's hex secret (surrounding whitespace ignored), with the same checks.
JobSecret read_job_secret_file(const std::string& path);
// kGeneratedSecretBytes from the kernel's random source.
JobSecret generate_job_secret();

// `n` bytes from getrandom(2). Throws std::runtime_error if the kernel has no random source.
std::string random_bytes(size_t n);
std::string to_hex(std::string_view bytes);
// False for odd lengths or non-hex characters.
bool from_hex(std::string_view hex, std::string* bytes);

// HMAC-SHA256(key, label || 0 || transcript): one side's proof that it knows `key`. The label names
// the side and protocol ("fsdp-store client", "fsdp-tcp accept") so a proof can never be reflected
// back as the other side's; the transcript holds both sides' nonces (and what else must not change).
Digest auth_proof(std::string_view key, std::string_view label, std::string_view transcript);

}  // namespace fsdp
