#include "collectives/core/options.h"

#include <cstdlib>
#include <string>

#include "collectives/core/errors.h"

namespace fsdp {
namespace {

// Parses a positive number from an environment variable, or returns `fallback` when unset.
double read_positive(const char* var, double fallback) {
  const char* text = std::getenv(var);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value > 0)) {
    throw InvalidArgument(std::string(var) + "='" + text + "' is not a positive number");
  }
  return value;
}

}  // namespace

CommOptions CommOptions::from_env() {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(
      static_cast<long long>(read_positive("FSDP_TIMEOUT_SEC", o.timeout.count() / 1000.0) * 1000.0));
  o.small_message_bytes = static_cast<size_t>(read_positive("FSDP_SMALL_MSG_BYTES", o.small_message_bytes));
  o.chunk_bytes = static_cast<size_t>(read_positive("FSDP_CHUNK_BYTES", o.chunk_bytes));
  if (const char* algo = std::getenv("FSDP_ALGO")) o.algorithms = algo;
  return o;
}

}  // namespace fsdp
