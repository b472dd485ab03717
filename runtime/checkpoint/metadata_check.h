// The one check of a checkpoint's parsed metadata, with no file read: the loader, `fsdp-ckpt verify`
// and export (reader.h, inspect.h, convert.h) run it, and so does the fuzz target
// fuzz/checkpoint_metadata.cc on whatever decode_metadata accepts.
#pragma once

#include <string>

#include "proto/checkpoint.pb.h"

namespace fsdp::runtime::checkpoint::detail {

// Everything a reader of the data relies on in the metadata, the one check that both the loader and
// `fsdp-ckpt verify` run: this build's format version, a checksum block size that is a positive
// multiple of 4 (the writer's rule), the training state's data-loader entry (training_state.h), shard and
// replicate degrees >= 1, non-negative shapes and file sizes, and per chunk: 0 <= row_begin <= row_end
// <= shape[0], length = rows x row elements x 4 bytes, inside its listed file, one CRC per block;
// the chunks of a tensor cover its rows exactly once. Throws CheckpointError naming the field.
void check_metadata(const proto::checkpoint::CheckpointMetadata& meta, const std::string& step_dir);

}  // namespace fsdp::runtime::checkpoint::detail
