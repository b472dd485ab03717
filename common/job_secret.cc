#include "common/job_secret.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/errors.h"
#include "common/knobs.h"

namespace fsdp {
namespace {

std::string trimmed(const std::string& text) {
  const char* space = " \t\r\n";
  const size_t begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(space) - begin + 1);
}

// The secret in `hex`, or InvalidArgument naming `where` (the variable or the file).
std::string parse_secret(const std::string& hex, const std::string& where) {
  std::string key;
  if (!from_hex(hex, &key)) {
    throw InvalidArgument(where + " is not a hex string (generate one with: openssl rand -hex 32)");
  }
  if (key.size() < kMinSecretBytes) {
    throw InvalidArgument(where + " holds " + std::to_string(key.size()) + " bytes; a job secret needs at least " +
                          std::to_string(kMinSecretBytes) + " (" + std::to_string(2 * kMinSecretBytes) +
                          " hex digits; openssl rand -hex 32 makes one)");
  }
  return key;
}

}  // namespace

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  for (size_t done = 0; done < n;) {
    const ssize_t got = ::getrandom(out.data() + done, n - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw std::runtime_error(std::string("getrandom failed: ") + std::strerror(errno));
    done += static_cast<size_t>(got);
  }
  return out;
}

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    out += digits[static_cast<uint8_t>(c) >> 4];
    out += digits[static_cast<uint8_t>(c) & 15];
  }
  return out;
}

bool from_hex(std::string_view hex, std::string* bytes) {
  if (hex.size() % 2 != 0) return false;
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = value(hex[i]), lo = value(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi << 4 | lo);
  }
  *bytes = std::move(out);
  return true;
}

JobSecret read_job_secret_file(const std::string& path) {
  const std::string where = std::string(knobs::kJobSecretFile.env) + "='" + path + "'";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InvalidArgument(where + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw InvalidArgument(where + " is not a regular file");
  // As ssh treats private keys: a secret others can read is no secret.
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    throw InvalidArgument(where + " has mode " + mode + ": its group or others may access it; the job secret "
                          "must be readable by its owner only (chmod 600 '" + path + "')");
  }
  std::ifstream in(path);
  if (!in) throw InvalidArgument(where + " cannot be read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return JobSecret{parse_secret(trimmed(text.str()), where), std::string(knobs::kJobSecretFile.env) + " (" + path + ")"};
}

JobSecret job_secret_from_env() {
  const bool inline_set = knobs::kJobSecret.is_set(), file_set = knobs::kJobSecretFile.is_set();
  if (inline_set && file_set) {
    throw InvalidArgument(std::string(knobs::kJobSecret.env) + " and " + std::string(knobs::kJobSecretFile.env) +
                          " are both set: set one");
  }
  if (file_set) return read_job_secret_file(knobs::kJobSecretFile.get());
  if (inline_set) {
    // The value is not repeated in the message: it may be most of a real secret.
    return JobSecret{parse_secret(trimmed(knobs::kJobSecret.get()), std::string(knobs::kJobSecret.env)),
                     std::string(knobs::kJobSecret.env)};
  }
  return {};
}

JobSecret generate_job_secret() { return JobSecret{random_bytes(kGeneratedSecretBytes), "generated"}; }

Digest auth_proof(std::string_view key, std::string_view label, std::string_view transcript) {
  std::string message(label);
  message += '\0';
  message += transcript;
  return hmac_sha256(key, message);
}

}  // namespace fsdp
