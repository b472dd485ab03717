#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "common/json.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/state_tensors.h"

namespace fsdp::runtime::checkpoint {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian, written raw");

namespace {

constexpr int64_t kMaxHeaderBytes = 100 << 20;  // as the reference implementation limits it

struct Placement {
  detail::TensorRef ref;
  int64_t begin = 0;  // relative to the data start
  int64_t end = 0;
};

std::vector<Placement> place(FsdpModel& model) {
  std::vector<Placement> out;
  int64_t offset = 0;
  for (auto& r : detail::tensor_refs(model, {})) {
    const int64_t bytes = model.model().units.at(static_cast<size_t>(r.unit)).params.at(static_cast<size_t>(r.param)).numel() *
                          detail::kF32Bytes;
    out.push_back(Placement{r, offset, offset + bytes});
    offset += bytes;
  }
  return out;
}

std::string make_header(const std::vector<Placement>& tensors, const std::map<std::string, std::string>& metadata) {
  std::string h = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [k, v] : metadata) {
    h += (first ? "" : ",") + json::quote(k) + ":" + json::quote(v);
    first = false;
  }
  h += "}";
  for (const auto& t : tensors) {
    h += "," + json::quote(t.ref.name) + ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t i = 0; i < t.ref.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.ref.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  return h;
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  File f = File::open_read(path);
  const int64_t file_size = f.size();
  uint64_t len = 0;
  if (f.pread_some(&len, 8, 0) != 8) throw CheckpointError(path + ": too short for a safetensors header");
  if (len > static_cast<uint64_t>(kMaxHeaderBytes) || static_cast<int64_t>(len) + 8 > file_size) {
    throw CheckpointError(path + ": header length " + std::to_string(len) + " does not fit the file of " +
                          std::to_string(file_size) + " bytes");
  }
  std::string text(len, '\0');
  if (f.pread_some(text.data(), len, 8) != len) throw CheckpointError(path + ": truncated header");
  SafetensorsHeader h;
  h.header_bytes = static_cast<int64_t>(len);
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

void export_safetensors(FsdpModel& model, Communicator& comm, const std::string& path,
                        const std::map<std::string, std::string>& metadata) {
  const auto tensors = place(model);
  const std::string header = make_header(tensors, metadata);
  const int64_t data_start = 8 + static_cast<int64_t>(header.size());
  const int64_t total = data_start + (tensors.empty() ? 0 : tensors.back().end);

  int64_t nonce = comm.rank() == 0 ? static_cast<int64_t>(make_nonce()) : 0;
  comm.broadcast(&nonce, &nonce, 1, DataType::kInt64, 0).wait();
  const std::string tmp = path + ".tmp-" + std::to_string(nonce);
  auto fail_if = [&](const std::string& mine, const char* phase) {
    const std::string e = detail::agree_on_error(comm, mine);
    if (e.empty()) return;
    if (comm.rank() == 0) std::filesystem::remove(tmp);
    throw CheckpointError("safetensors export to " + path + " (" + phase + "): " + e);
  };

  std::string error;
  if (comm.rank() == 0) {
    try {
      File f = File::create_new(tmp);
      const uint64_t len = header.size();
      f.pwrite_all(&len, 8, 0);
      f.pwrite_all(header.data(), header.size(), 8);
      f.truncate(total);  // the writers fill the rest
      f.close();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  fail_if(error, "header");

  const ProcessGroups& groups = model.groups();
  if (groups.replica_index() == 0) {
    try {
      File f = File::open_write(tmp);
      const int64_t shard_rank = groups.shard_rank();
      for (const auto& t : tensors) {
        const auto& pl = model.unit(t.ref.unit).layout().params().at(static_cast<size_t>(t.ref.param));
        const sharding::RowRange rows = pl.rows_of(shard_rank);
        if (rows.size() == 0) continue;
        const std::span<float> shard = detail::shard_of(model, nullptr, t.ref);
        f.pwrite_all(shard.data(), static_cast<size_t>(rows.size() * pl.row_numel * detail::kF32Bytes),
                     data_start + t.begin + rows.begin * pl.row_numel * detail::kF32Bytes);
      }
      f.sync();
      f.close();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  fail_if(error, "data");

  if (comm.rank() == 0) {
    try {
      rename_durable(tmp, path);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  fail_if(error, "commit");
}

std::map<std::string, std::string> import_safetensors(FsdpModel& model, Communicator& comm, const std::string& path) {
  model.discard_step();  // prefetched all-gathers hold the old values
  std::string error;
  SafetensorsHeader header;
  try {
    header = read_safetensors_header(path);
    std::unordered_map<std::string, const SafetensorsEntry*> by_name;
    for (const auto& e : header.tensors) by_name[e.name] = &e;
    const auto refs = detail::tensor_refs(model, {});
    if (header.tensors.size() != refs.size()) {
      throw CheckpointError(path + " holds " + std::to_string(header.tensors.size()) + " tensors, the model has " +
                            std::to_string(refs.size()) + " parameters");
    }
    File f = File::open_read(path);
    const int64_t shard_rank = model.groups().shard_rank();
    for (const auto& r : refs) {
      const auto it = by_name.find(r.name);
      if (it == by_name.end()) throw CheckpointError(path + " has no tensor '" + r.name + "'");
      const SafetensorsEntry& e = *it->second;
      if (e.dtype != "F32") throw CheckpointError(path + ": tensor '" + r.name + "' is " + e.dtype + ", only F32 is read");
      if (e.shape != r.shape) throw CheckpointError(path + ": tensor '" + r.name + "' has another shape than the model's");
      const auto& pl = model.unit(r.unit).layout().params().at(static_cast<size_t>(r.param));
      if (e.end - e.begin != pl.numel() * detail::kF32Bytes) {
        throw CheckpointError(path + ": data_offsets of '" + r.name + "' do not match its shape");
      }
      std::span<float> dst = detail::shard_of(model, nullptr, r);
      std::fill(dst.begin(), dst.end(), 0.f);
      const sharding::RowRange rows = pl.rows_of(shard_rank);
      if (rows.size() == 0) continue;
      const size_t bytes = static_cast<size_t>(rows.size() * pl.row_numel * detail::kF32Bytes);
      if (f.pread_some(dst.data(), bytes, e.begin + rows.begin * pl.row_numel * detail::kF32Bytes) != bytes) {
        throw CheckpointError(path + " is truncated inside tensor '" + r.name + "'");
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = detail::agree_on_error(comm, error);
  if (!error.empty()) throw CheckpointError("safetensors import: " + error);
  return header.metadata;
}

}  // namespace fsdp::runtime::checkpoint
