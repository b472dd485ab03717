#include "spec/checked_size.h"

namespace fsdp::spec {
namespace {

[[noreturn]] void overflow(int64_t a, const char* op, int64_t b, std::string_view what, std::string_view driver) {
  throw SizeOverflow(std::string(what) + ": " + std::to_string(a) + op + std::to_string(b) + " overflows int64",
                     driver);
}

}  // namespace

int64_t checked_mul(int64_t a, int64_t b, std::string_view what, std::string_view driver) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow(a, " x ", b, what, driver);
  return r;
}

int64_t checked_add(int64_t a, int64_t b, std::string_view what, std::string_view driver) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow(a, " + ", b, what, driver);
  return r;
}

}  // namespace fsdp::spec
