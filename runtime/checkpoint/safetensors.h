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
// With Hugging Face names the q/k rows of a rank are not contiguous in the file: it writes and reads
// them in runs of consecutive file rows (half a head each).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/safetensors_header.h"
#include "runtime/fsdp_model.h"

namespace fsdp::runtime::checkpoint {

// How the model's tensors are stored in a file.
struct SafetensorsFormat {
  // Export: "F32", or "BF16" / "F16" rounded to nearest, ties to even (common/float_formats.h).
  // Import reads F32, BF16 and F16 whatever this says, tensor by tensor.
  std::string dtype = "F32";
  // Set: Hugging Face Llama names and q/k row order (hf_llama.h) in the file, TorchTitan's in the model.
  std::optional<HfLlamaHeads> hf;
};

// Writes path atomically (path.tmp-<nonce>, fsync, rename; rank 0 creates missing folders above it).
// Only master parameters; no optimizer state (the format has no place for it).
void export_safetensors(FsdpModel& model, Communicator& comm, const std::string& path,
                        const std::map<std::string, std::string>& metadata = {}, const SafetensorsFormat& format = {});

// Loads the parameters named like the model's (every one must be present, F32, BF16 or F16, same shape;
// extra tensors in the file are refused too, each named) into the master shards; returns the file's
// __metadata__.
std::map<std::string, std::string> import_safetensors(FsdpModel& model, Communicator& comm, const std::string& path,
                                                      const SafetensorsFormat& format = {});
// The same from several files read as one, as Hugging Face shards a checkpoint (model-00001-of-00004...):
// every tensor in exactly one of them (one in two files is refused naming both); their metadata is the
// first file's.
std::map<std::string, std::string> import_safetensors(FsdpModel& model, Communicator& comm,
                                                      const std::vector<std::string>& paths,
                                                      const SafetensorsFormat& format = {});

// A parsed safetensors header (no communication): for tools and tests.
SafetensorsHeader read_safetensors_header(const std::string& path);

// --- without a model: what fsdp-ckpt export / import use ---

// A whole tensor in memory, under the model's (TorchTitan's) name.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // numel elements, row-major
};
// Writes the tensors in order under `format` (names, row order, dtype), atomically as above.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, const SafetensorsFormat& format);
// Every tensor of the file under the model's names (format.hf maps them back), as f32, in file order.
std::vector<NamedTensor> read_safetensors(const std::string& path, const SafetensorsFormat& format);
std::vector<NamedTensor> read_safetensors(const std::vector<std::string>& paths, const SafetensorsFormat& format);

}  // namespace fsdp::runtime::checkpoint
