// The training state's entries a checkpoint's readers rely on, decoded and checked in one place: the
// loader (check_metadata, then the trainer's resume) and `fsdp-ckpt verify` refuse the same entries with
// the same words. Other keys are the client's and stay opaque.
#pragma once

#include <cstdint>
#include <string>

#include "proto/checkpoint.pb.h"

namespace fsdp::runtime::checkpoint {

// training_state["data_loader"]: where the data loader resumes, as fsdp-train writes it: five native
// int64 (step, micro_step, then the token stream's token, document and offset); 16 bytes (step and
// micro_step only) in checkpoints from before the stream position.
inline constexpr const char* kDataLoaderKey = "data_loader";
struct LoaderPosition {
  int64_t step = 1;        // the next batch's step (1-based)
  int64_t micro_step = 0;  // and its micro-step
  int64_t token = 0;       // a stream source's position at that batch's row 0
  int64_t document = 0;
  int64_t offset = 0;
};
std::string encode_loader_position(const LoaderPosition& position);
// Throws CheckpointError "`where`training_state['data_loader']: ..." naming the field: a size other than
// 16 or 40 bytes, step < 1, micro_step < 0, or a negative stream position.
LoaderPosition decode_loader_position(const std::string& bytes, const std::string& where = "");

namespace detail {
// Every entry above that `meta` holds (a model-only save holds none); part of check_metadata().
void check_training_state(const proto::checkpoint::CheckpointMetadata& meta, const std::string& where);
}  // namespace detail

}  // namespace fsdp::runtime::checkpoint
