// What the checkpoint, safetensors and inspection code share: the format constants, the model state
// as named tensors (TensorRef) and the rank's shard of each, and the collective agreement on errors.
// Not part of the public API.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/fsdp_model.h"
#include "runtime/optimizer.h"

namespace fsdp::proto::checkpoint {
class Chunk;
}

namespace fsdp::runtime::checkpoint::detail {

// 2: metadata.pb ends in a CRC32C footer (metadata_file.h); 1 (no footer) still reads.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr const char* kMetadataFile = "metadata.pb";
inline constexpr const char* kLatestFile = "latest";
inline constexpr const char* kTmpPrefix = ".tmp-";
inline constexpr int64_t kF32Bytes = 4;

// Every rank's string, in rank order (two all-gathers: lengths, then the padded bytes).
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);
// Collective: "" when every rank passed "", else "rank <r>: <its message>" of the lowest failing rank,
// the same on every rank.
std::string agree_on_error(Communicator& comm, const std::string& mine);

// One logical tensor of the model's state: parameter `param` of unit `unit`, role 0 = the parameter,
// role k > 0 = optimizer state k - 1. Ordered: all parameters, then each state in turn.
struct TensorRef {
  int unit = 0;
  int param = 0;
  int role = 0;
  std::string name;
  std::string role_name;
  std::vector<int64_t> shape;
};
// The rank's tensors (units of model.model()).
std::vector<TensorRef> tensor_refs(FsdpModel& model, const std::vector<std::string>& state_names);
// Every tensor of the whole model (units of model.full_model()): what a checkpoint lists. The same as
// tensor_refs without expert parallelism; with it, every expert of every rank.
std::vector<TensorRef> full_tensor_refs(const FsdpModel& model, const std::vector<std::string>& state_names);
// role_name + "/" + name -> position in refs.
std::unordered_map<std::string, int> tensor_index(const std::vector<TensorRef>& refs);
// The rank's shard of that tensor in the current layout (shard_numel elements, padding included).
std::span<float> shard_of(FsdpModel& model, ShardedOptimizer* optimizer, const TensorRef& t);

// "[4, 5]": a shape as error messages print it.
std::string shape_text(const std::vector<int64_t>& shape);

// "shard-00001-of-00004.bin": the file shard rank r writes at shard degree n.
std::string shard_file_name(int64_t shard_rank, int64_t shard_degree);
// The chunk's whole CRC32C and one per `block` bytes from its start (c.length() must be set).
void fill_block_crcs(proto::checkpoint::Chunk& c, const char* data, int64_t block);

// Counts a file written in this save and SIGKILLs the process when the test hook says so.
void count_file_written(int& written_this_save);

}  // namespace fsdp::runtime::checkpoint::detail
