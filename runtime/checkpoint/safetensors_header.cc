#include "runtime/checkpoint/safetensors_header.h"

#include <algorithm>
#include <stdexcept>

#include "common/json.h"
#include "runtime/checkpoint/errors.h"

namespace fsdp::runtime::checkpoint {

void check_safetensors_header_length(uint64_t len, int64_t file_size, const std::string& path) {
  if (len > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes) || static_cast<int64_t>(len) + 8 > file_size) {
    throw CheckpointError(path + ": header length " + std::to_string(len) + " does not fit the file of " +
                          std::to_string(file_size) + " bytes");
  }
}

SafetensorsHeader decode_safetensors_header(std::string_view text, int64_t file_size, const std::string& path) {
  SafetensorsHeader h;
  h.header_bytes = static_cast<int64_t>(text.size());
  const int64_t data_start = 8 + h.header_bytes;
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const std::runtime_error& e) {
    throw CheckpointError(path + ": header: " + e.what());
  }
  try {
    for (const auto& [name, v] : root.object()) {
      if (name == "__metadata__") {
        for (const auto& [k, s] : v.object()) h.metadata[k] = s.string();
        continue;
      }
      SafetensorsEntry e;
      e.name = name;
      e.path = path;
      try {
        e.dtype = v.at("dtype").string();
        for (const auto& d : v.at("shape").array()) e.shape.push_back(d.integer());
        const auto& off = v.at("data_offsets").array();
        if (off.size() != 2) throw CheckpointError("data_offsets must have two entries");
        e.begin = data_start + off[0].integer();
        e.end = data_start + off[1].integer();
      } catch (const std::runtime_error& err) {
        throw CheckpointError("tensor '" + name + "': " + err.what());
      }
      if (e.begin < data_start || e.begin > e.end || e.end > file_size) {
        throw CheckpointError("data_offsets of '" + name + "' lie outside the file of " + std::to_string(file_size) + " bytes");
      }
      h.tensors.push_back(std::move(e));
    }
  } catch (const std::runtime_error& e) {
    throw CheckpointError(path + ": " + e.what());
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  return h;
}

}  // namespace fsdp::runtime::checkpoint
