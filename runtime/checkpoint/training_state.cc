#include "runtime/checkpoint/training_state.h"

#include <cstring>

#include "runtime/checkpoint/errors.h"

namespace fsdp::runtime::checkpoint {

namespace {
constexpr size_t kFullBytes = sizeof(LoaderPosition);
constexpr size_t kStepsOnlyBytes = 2 * sizeof(int64_t);
static_assert(kFullBytes == 5 * sizeof(int64_t), "LoaderPosition is five int64, no padding");
}  // namespace

std::string encode_loader_position(const LoaderPosition& position) {
  std::string bytes(kFullBytes, '\0');
  std::memcpy(bytes.data(), &position, kFullBytes);
  return bytes;
}

LoaderPosition decode_loader_position(const std::string& bytes, const std::string& where) {
  const std::string field = where + "training_state['" + kDataLoaderKey + "']";
  if (bytes.size() != kFullBytes && bytes.size() != kStepsOnlyBytes) {
    throw CheckpointError(field + ": " + std::to_string(bytes.size()) + " bytes, expected " +
                          std::to_string(kFullBytes) + " (or " + std::to_string(kStepsOnlyBytes) +
                          " from before the stream position)");
  }
  LoaderPosition p;
  std::memcpy(&p, bytes.data(), bytes.size());
  const auto refuse_if = [&](bool bad, const char* name, int64_t value, const char* rule) {
    if (bad) throw CheckpointError(field + ": " + name + " " + std::to_string(value) + " must be " + rule);
  };
  refuse_if(p.step < 1, "step", p.step, ">= 1");
  refuse_if(p.micro_step < 0, "micro_step", p.micro_step, ">= 0");
  refuse_if(p.token < 0, "token", p.token, ">= 0");
  refuse_if(p.document < 0, "document", p.document, ">= 0");
  refuse_if(p.offset < 0, "offset", p.offset, ">= 0");
  return p;
}

namespace detail {

void check_training_state(const proto::checkpoint::CheckpointMetadata& meta, const std::string& where) {
  const auto it = meta.training_state().find(kDataLoaderKey);
  if (it != meta.training_state().end()) decode_loader_position(it->second, where);
}

}  // namespace detail
}  // namespace fsdp::runtime::checkpoint
