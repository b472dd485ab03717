// Consolidated single-file export and import of a sharded model in the safetensors format:
//
//   [8 bytes: header length H, little-endian u64][H bytes: JSON header, space-padded to 8][raw tensor data]
//   header = {"__metadata__": {"k": "v", ...},
//             "<param name>": {"dtype": "F32", "shape": [rows, ...], "data_offsets": [begin, end]}, ...}
//
// data_offsets are relative to the start of the data; tensors follow the model's parameter order.
// No gather at all: rank 0 writes the header and sizes the file, then every rank of HSDP replica 0
// pwrite()s its own real rows of each parameter at their offsets; import preads each rank's rows. No
// rank ever holds more than its shards (plus the header). Both are collective over `comm` (every rank
// of the job in world order, e.g. Checkpointer::comm()); errors are agreed on as in checkpointer.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/fsdp_model.h"

namespace fsdp::runtime::checkpoint {

// Writes path atomically (path.tmp-<nonce>, fsync, rename). Only master parameters, in fp32; no
// optimizer state (the format has no place for it).
void export_safetensors(FsdpModel& model, Communicator& comm, const std::string& path,
                        const std::map<std::string, std::string>& metadata = {});

// Loads the parameters named like the model's (every one must be present, F32, same shape; extra
// tensors in the file are refused too) into the master shards; returns the file's __metadata__.
std::map<std::string, std::string> import_safetensors(FsdpModel& model, Communicator& comm, const std::string& path);

// A parsed safetensors header (no communication): for tools and tests.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // absolute file offsets of the data
  int64_t end = 0;
};
struct SafetensorsHeader {
  int64_t header_bytes = 0;  // H
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> tensors;  // in file order
};
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace fsdp::runtime::checkpoint
