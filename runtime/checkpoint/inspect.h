// Reading a checkpoint without a model or communication: what `fsdp-ckpt inspect` and `verify` do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/checkpoint.pb.h"
#include "runtime/checkpoint/reader.h"  // read_metadata

namespace fsdp::runtime::checkpoint {

using CheckpointMetadata = proto::checkpoint::CheckpointMetadata;

// `path` is a step directory (holds metadata.pb) or a checkpoint folder, which resolves to its latest
// committed step. Throws CheckpointError when neither.
std::string resolve_step_dir(const std::string& path);

// Human-readable summary: step, degrees, optimizer, parameters with shapes, files with sizes,
// training-state keys with their sizes.
std::string describe(const CheckpointMetadata& meta, const std::string& step_dir);

struct VerifyReport {
  int64_t files = 0;
  int64_t chunks = 0;
  int64_t bytes = 0;                // data bytes read and checked
  std::vector<std::string> errors;  // each names the file (and parameter)
  bool ok() const { return errors.empty(); }
};
// Runs the loader's checks without a model: check_metadata (training state included), then the
// loader's ShardReader over every chunk's rows (file sizes, every checksum block); one error per bad
// file, naming it and the parameter.
VerifyReport verify_checkpoint(const std::string& step_dir);

}  // namespace fsdp::runtime::checkpoint
