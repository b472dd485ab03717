#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "common/float_formats.h"
#include "common/json.h"
#include "runtime/checkpoint/errors.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/safetensors_header.h"
#include "runtime/checkpoint/state_tensors.h"

namespace fsdp::runtime::checkpoint {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian, written raw");

namespace {

int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  throw CheckpointError("safetensors dtype " + dtype + " is none of F32, BF16, F16");
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
// Rows are dim 0 (a scalar is one row); FSDP shards and the HF permutation both work on whole rows.
int64_t rows_of(const std::vector<int64_t>& shape) { return shape.empty() ? 1 : shape[0]; }
int64_t row_numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::string file_name_of(const std::string& model_name, const SafetensorsFormat& format) {
  return format.hf ? to_hf_name(model_name) : model_name;
}

// One tensor as the file holds it: data_offsets [begin, end) relative to the data start.
struct Placement {
  std::string model_name;
  std::string file_name;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  int64_t end = 0;
};

std::vector<Placement> place(const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                             const SafetensorsFormat& format) {
  const int64_t elem = dtype_bytes(format.dtype);
  std::vector<Placement> out;
  int64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    const int64_t bytes = numel_of(shape) * elem;
    out.push_back(Placement{name, file_name_of(name, format), shape, offset, offset + bytes});
    offset += bytes;
  }
  return out;
}

std::string make_header(const std::vector<Placement>& tensors, const std::string& dtype,
                        const std::map<std::string, std::string>& metadata) {
  std::string h = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [k, v] : metadata) {
    h += (first ? "" : ",") + json::quote(k) + ":" + json::quote(v);
    first = false;
  }
  h += "}";
  for (const auto& t : tensors) {
    h += "," + json::quote(t.file_name) + ":{\"dtype\":" + json::quote(dtype) + ",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  return h;
}

// Calls fn(model_row, file_row, count) for maximal runs of model rows [rows.begin, rows.end) of
// tensor `model_name` (total_rows rows) that lie at consecutive file rows.
template <class Fn>
void for_each_run(const std::string& model_name, int64_t total_rows, spec::RowRange rows,
                  const SafetensorsFormat& format, Fn fn) {
  auto file_row = [&](int64_t r) { return format.hf ? hf_row_of(model_name, r, total_rows, *format.hf) : r; };
  int64_t r = rows.begin;
  while (r < rows.end) {
    const int64_t first = file_row(r);
    int64_t n = 1;
    while (r + n < rows.end && file_row(r + n) == first + n) ++n;
    fn(r, first, n);
    r += n;
  }
}

// Model rows [rows.begin, rows.end) of a placed tensor from src (row_numel floats each) into the file.
void write_rows(File& f, int64_t tensor_start, const std::string& model_name, const std::vector<int64_t>& shape,
                spec::RowRange rows, const float* src, const SafetensorsFormat& format, std::vector<uint16_t>& buf) {
  const int64_t row_numel = row_numel_of(shape);
  const int64_t elem = dtype_bytes(format.dtype);
  for_each_run(model_name, rows_of(shape), rows, format, [&](int64_t model_row, int64_t file_row, int64_t n) {
    const float* run = src + (model_row - rows.begin) * row_numel;
    const size_t count = static_cast<size_t>(n * row_numel);
    const int64_t offset = tensor_start + file_row * row_numel * elem;
    if (elem == 4) {
      f.pwrite_all(run, count * 4, offset);
      return;
    }
    buf.resize(count);
    if (format.dtype == "BF16") {
      for (size_t i = 0; i < count; ++i) buf[i] = float_to_bf16(run[i]);
    } else {
      for (size_t i = 0; i < count; ++i) buf[i] = float_to_half(run[i]);
    }
    f.pwrite_all(buf.data(), count * 2, offset);
  });
}

// Model rows [rows.begin, rows.end) of a file tensor into dst (row_numel floats each), as f32.
void read_rows(const File& f, const SafetensorsEntry& e, const std::string& model_name, spec::RowRange rows, float* dst,
               const SafetensorsFormat& format, std::vector<uint16_t>& buf) {
  const int64_t row_numel = row_numel_of(e.shape);
  const int64_t elem = dtype_bytes(e.dtype);
  for_each_run(model_name, rows_of(e.shape), rows, format, [&](int64_t model_row, int64_t file_row, int64_t n) {
    float* run = dst + (model_row - rows.begin) * row_numel;
    const size_t count = static_cast<size_t>(n * row_numel);
    const int64_t offset = e.begin + file_row * row_numel * elem;
    const bool whole = elem == 4 ? f.pread_some(run, count * 4, offset) == count * 4
                                 : (buf.resize(count), f.pread_some(buf.data(), count * 2, offset) == count * 2);
    if (!whole) throw CheckpointError(f.path() + " is truncated inside tensor '" + e.name + "'");
    if (e.dtype == "BF16") {
      for (size_t i = 0; i < count; ++i) run[i] = bf16_to_float(buf[i]);
    } else if (e.dtype == "F16") {
      for (size_t i = 0; i < count; ++i) run[i] = half_to_float(buf[i]);
    }
  });
}

// Every way the file's tensors differ from the expected (model-named) ones: missing, extra, another
// shape, unsupported dtype, data size not matching the shape. Returns the file entry of each expected
// tensor, in the order given; throws listing the first few problems.
std::vector<const SafetensorsEntry*> match_tensors(const SafetensorsHeader& header,
                                                   const std::vector<std::pair<std::string, std::vector<int64_t>>>& want,
                                                   const SafetensorsFormat& format, const std::string& path) {
  std::unordered_map<std::string, const SafetensorsEntry*> by_name;
  for (const auto& e : header.tensors) by_name[e.name] = &e;
  std::vector<std::string> problems;
  std::vector<const SafetensorsEntry*> out;
  std::unordered_map<std::string, bool> wanted;
  for (const auto& [name, shape] : want) {
    const std::string file_name = file_name_of(name, format);
    wanted[file_name] = true;
    const auto it = by_name.find(file_name);
    out.push_back(it == by_name.end() ? nullptr : it->second);
    if (it == by_name.end()) {
      problems.push_back("tensor '" + file_name + "' is missing");
      continue;
    }
    const SafetensorsEntry& e = *it->second;
    if (e.shape != shape) {
      problems.push_back("tensor '" + file_name + "' has shape " + detail::shape_text(e.shape) + ", the model's is " +
                         detail::shape_text(shape));
    } else if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16") {
      problems.push_back("tensor '" + file_name + "' is " + e.dtype + "; F32, BF16 and F16 are read");
    } else if (e.end - e.begin != numel_of(shape) * dtype_bytes(e.dtype)) {
      problems.push_back("data_offsets of tensor '" + file_name + "' do not match its shape and dtype");
    }
  }
  for (const auto& e : header.tensors) {
    if (!wanted.count(e.name)) problems.push_back("tensor '" + e.name + "' is not in the model");
  }
  if (problems.empty()) return out;
  std::string msg = path + " does not match the model:";
  for (size_t i = 0; i < problems.size() && i < 8; ++i) msg += "\n  " + problems[i];
  if (problems.size() > 8) msg += "\n  ... and " + std::to_string(problems.size() - 8) + " more";
  throw CheckpointError(msg);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> model_tensors(FsdpModel& model) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& r : detail::tensor_refs(model, {})) out.emplace_back(r.name, r.shape);
  return out;
}

// Names the files in errors: the one path, or the first and how many more.
std::string describe_files(const std::vector<std::string>& paths) {
  if (paths.empty()) throw CheckpointError("no safetensors file given");
  return paths.size() == 1 ? paths[0] : paths[0] + " and " + std::to_string(paths.size() - 1) + " more files";
}

// Several files read as one (a sharded Hugging Face checkpoint): every tensor in exactly one of them;
// the metadata of the first.
SafetensorsHeader read_headers(const std::vector<std::string>& paths) {
  SafetensorsHeader merged;
  std::unordered_map<std::string, std::string> seen;  // tensor -> file
  for (size_t i = 0; i < paths.size(); ++i) {
    SafetensorsHeader h = read_safetensors_header(paths[i]);
    if (i == 0) merged.metadata = h.metadata;
    for (auto& e : h.tensors) {
      const auto [it, fresh] = seen.emplace(e.name, paths[i]);
      if (!fresh) throw CheckpointError("tensor '" + e.name + "' is in both " + it->second + " and " + paths[i]);
      merged.tensors.push_back(std::move(e));
    }
  }
  return merged;
}

// The open files of a set, by path.
class OpenFiles {
 public:
  const File& operator[](const std::string& path) {
    auto it = files_.find(path);
    if (it == files_.end()) it = files_.emplace(path, File::open_read(path)).first;
    return it->second;
  }

 private:
  std::unordered_map<std::string, File> files_;
};

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  File f = File::open_read(path);
  const int64_t file_size = f.size();
  uint64_t len = 0;
  if (f.pread_some(&len, 8, 0) != 8) throw CheckpointError(path + ": too short for a safetensors header");
  check_safetensors_header_length(len, file_size, path);
  std::string text(len, '\0');
  if (f.pread_some(text.data(), len, 8) != len) throw CheckpointError(path + ": truncated header");
  return decode_safetensors_header(text, file_size, path);
}

namespace {

// Safetensors files hold whole tensors, written and read over the shard group; expert units shard over
// other groups. Every rank has the same degree, so all refuse together.
void refuse_expert_parallel(const FsdpModel& model, const char* what) {
  if (model.expert_parallel() > 1) {
    throw CheckpointError(std::string("safetensors ") + what + " with parallelism.expert_parallel_degree = " +
                          std::to_string(model.expert_parallel()) + " is not implemented (checkpoints are)");
  }
}

}  // namespace

void export_safetensors(FsdpModel& model, Communicator& comm, const std::string& path,
                        const std::map<std::string, std::string>& metadata, const SafetensorsFormat& format) {
  refuse_expert_parallel(model, "export");
  const auto refs = detail::tensor_refs(model, {});
  const auto tensors = place(model_tensors(model), format);  // names checked here, before any file exists
  const std::string header = make_header(tensors, format.dtype, metadata);
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
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
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
      std::vector<uint16_t> buf;
      for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        const auto& pl = model.unit(refs[i].unit).layout().params().at(static_cast<size_t>(refs[i].param));
        const spec::RowRange rows = pl.rows_of(shard_rank);
        if (rows.size() == 0) continue;
        write_rows(f, data_start + t.begin, t.model_name, t.shape, rows, detail::shard_of(model, nullptr, refs[i]).data(),
                   format, buf);
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

std::map<std::string, std::string> import_safetensors(FsdpModel& model, Communicator& comm,
                                                      const std::vector<std::string>& paths,
                                                      const SafetensorsFormat& format) {
  refuse_expert_parallel(model, "import");
  model.discard_step();  // prefetched all-gathers hold the old values
  std::string error;
  SafetensorsHeader header;
  try {
    header = read_headers(paths);
    const auto refs = detail::tensor_refs(model, {});
    const auto entries = match_tensors(header, model_tensors(model), format, describe_files(paths));
    OpenFiles files;
    const int64_t shard_rank = model.groups().shard_rank();
    std::vector<uint16_t> buf;
    for (size_t i = 0; i < refs.size(); ++i) {
      const auto& pl = model.unit(refs[i].unit).layout().params().at(static_cast<size_t>(refs[i].param));
      std::span<float> dst = detail::shard_of(model, nullptr, refs[i]);
      std::fill(dst.begin(), dst.end(), 0.f);  // padding rows stay zero
      const spec::RowRange rows = pl.rows_of(shard_rank);
      if (rows.size() > 0) read_rows(files[entries[i]->path], *entries[i], refs[i].name, rows, dst.data(), format, buf);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = detail::agree_on_error(comm, error);
  if (!error.empty()) throw CheckpointError("safetensors import: " + error);
  return header.metadata;
}

std::map<std::string, std::string> import_safetensors(FsdpModel& model, Communicator& comm, const std::string& path,
                                                      const SafetensorsFormat& format) {
  return import_safetensors(model, comm, std::vector<std::string>{path}, format);
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, const SafetensorsFormat& format) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& t : tensors) {
    if (static_cast<int64_t>(t.data.size()) != numel_of(t.shape)) {
      throw CheckpointError("tensor '" + t.name + "' holds " + std::to_string(t.data.size()) + " values for shape " +
                            detail::shape_text(t.shape));
    }
    shapes.emplace_back(t.name, t.shape);
  }
  const auto placed = place(shapes, format);
  const std::string header = make_header(placed, format.dtype, metadata);
  const int64_t data_start = 8 + static_cast<int64_t>(header.size());
  const std::string tmp = path + ".tmp-" + std::to_string(make_nonce());
  try {
    File f = File::create_new(tmp);
    const uint64_t len = header.size();
    f.pwrite_all(&len, 8, 0);
    f.pwrite_all(header.data(), header.size(), 8);
    f.truncate(data_start + (placed.empty() ? 0 : placed.back().end));
    std::vector<uint16_t> buf;
    for (size_t i = 0; i < placed.size(); ++i) {
      write_rows(f, data_start + placed[i].begin, placed[i].model_name, placed[i].shape,
                 spec::RowRange{0, rows_of(placed[i].shape)}, tensors[i].data.data(), format, buf);
    }
    f.sync();
    f.close();
    rename_durable(tmp, path);
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw CheckpointError("safetensors write of " + path + ": " + e.what());
  }
}

std::vector<NamedTensor> read_safetensors(const std::vector<std::string>& paths, const SafetensorsFormat& format) {
  const SafetensorsHeader header = read_headers(paths);
  std::vector<std::pair<std::string, std::vector<int64_t>>> want;
  for (const auto& e : header.tensors) want.emplace_back(format.hf ? from_hf_name(e.name) : e.name, e.shape);
  const auto entries = match_tensors(header, want, format, describe_files(paths));  // dtypes and sizes
  OpenFiles files;
  std::vector<NamedTensor> out;
  std::vector<uint16_t> buf;
  for (size_t i = 0; i < want.size(); ++i) {
    NamedTensor t{want[i].first, want[i].second, std::vector<float>(static_cast<size_t>(numel_of(want[i].second)))};
    read_rows(files[entries[i]->path], *entries[i], t.name, spec::RowRange{0, rows_of(t.shape)}, t.data.data(), format,
              buf);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<NamedTensor> read_safetensors(const std::string& path, const SafetensorsFormat& format) {
  return read_safetensors(std::vector<std::string>{path}, format);
}

}  // namespace fsdp::runtime::checkpoint
