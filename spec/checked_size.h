// Sizes in int64 computed from what a user may give (a model's dims, a sequence length, a batch): a
// product or sum that does not fit is refused by name instead of wrapping (undefined behaviour) into a
// small or negative size. So every input gets either a true size or a SizeOverflow.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "spec/spec_error.h"

namespace fsdp::spec {

// An int64 size that overflowed, or a count past what the spec builds (counted() false: make_llama's
// kMaxLayers): what() names the quantity and its operands; driver() the input that makes it large (a
// ModelDims or Policy field: "dim", "layers", "vocab", "seq_len", "micro_batch", ...), so a caller can
// name its own key for it (fsdp-train: model.dim, training.seq_len, ...).
class SizeOverflow : public SpecError {
 public:
  SizeOverflow(const std::string& what, std::string_view driver, bool counted = true)
      : SpecError(what), driver_(driver), counted_(counted) {}
  const std::string& driver() const { return driver_; }
  // True when the bytes it stands for are more than int64 counts.
  bool counted() const { return counted_; }

 private:
  std::string driver_;
  bool counted_;
};

// a * b and a + b, or SizeOverflow("<what>: a x b overflows int64", driver).
int64_t checked_mul(int64_t a, int64_t b, std::string_view what, std::string_view driver);
int64_t checked_add(int64_t a, int64_t b, std::string_view what, std::string_view driver);

}  // namespace fsdp::spec
