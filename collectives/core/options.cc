#include "collectives/core/options.h"

#include <cstdlib>
#include <string>

#include "collectives/core/errors.h"

namespace fsdp {
namespace {

// Parses a number from an environment variable (> 0, or >= 0 when zero is allowed), or returns
// `fallback` when the variable is unset.
double read_number(const char* var, double fallback, bool allow_zero = false) {
  const char* text = std::getenv(var);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(allow_zero ? value >= 0 : value > 0)) {
    throw InvalidArgument(std::string(var) + "='" + text + "' is not a " + (allow_zero ? "non-negative" : "positive") +
                          " number");
  }
  return value;
}

}  // namespace

CommOptions CommOptions::from_env() {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(
      static_cast<long long>(read_number("FSDP_TIMEOUT_SEC", o.timeout.count() / 1000.0) * 1000.0));
  // 0 turns the latency algorithms off.
  o.small_message_bytes = static_cast<size_t>(read_number("FSDP_SMALL_MSG_BYTES", o.small_message_bytes, true));
  o.chunk_bytes = static_cast<size_t>(read_number("FSDP_CHUNK_BYTES", o.chunk_bytes));
  if (const char* algo = std::getenv("FSDP_ALGO")) o.algorithms = algo;
  return o;
}

}  // namespace fsdp
