// Reading a committed checkpoint, in the steps every reader takes: choose the step, read and check its
// metadata, match its tensors against the model's, then read row ranges verifying their checksums.
// Checkpointer::load_from runs them in that order; fsdp-ckpt's inspect and verify use the same pieces.
// Every failure throws CheckpointError naming the file (and the parameter).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "proto/checkpoint.pb.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/metadata_check.h"  // check_metadata
#include "runtime/checkpoint/state_tensors.h"
#include "spec/shard_layout.h"

namespace fsdp::runtime::checkpoint {

// metadata.pb of a step directory, parsed (nothing else checked: inspect shows any metadata).
proto::checkpoint::CheckpointMetadata read_metadata(const std::string& step_dir);

}  // namespace fsdp::runtime::checkpoint

namespace fsdp::runtime::checkpoint::detail {

// The committed step to load from `folder`: `step`, or the latest when step < 0. Throws naming the
// folder and the committed steps when there is no such step.
int64_t choose_step(const std::string& folder, int64_t step);

// Every way the saved parameters differ from the model's (missing, extra, other shape, unsupported
// dtype); throws listing the first few when there are any.
void check_tensors_match(const proto::checkpoint::CheckpointMetadata& meta, const std::vector<TensorRef>& refs,
                         const std::string& step_dir);

// Reads rows of saved tensors out of a step directory's shard files, opening each file once and
// checking its size against the metadata, and verifying every checksum block a read touches.
class ShardReader {
 public:
  ShardReader(std::string step_dir, const proto::checkpoint::CheckpointMetadata& meta);
  // Rows [rows.begin, rows.end) of tensor `t` (row_numel floats each) into dst; `what` names the
  // tensor in errors. Throws unless the chunks cover every row.
  void read_rows(const proto::checkpoint::Tensor& t, spec::RowRange rows, int64_t row_numel, std::span<float> dst,
                 const std::string& what);
  // Opens shard file `name` (once) and checks its size against the metadata; read_rows does it too.
  void open(const std::string& name, const std::string& what) { file_for(name, what); }

 private:
  File& file_for(const std::string& name, const std::string& what);

  std::string dir_;
  int64_t block_;
  std::unordered_map<std::string, int64_t> expected_size_;
  std::unordered_map<std::string, File> open_files_;
  std::vector<char> buf_;
};

}  // namespace fsdp::runtime::checkpoint::detail
