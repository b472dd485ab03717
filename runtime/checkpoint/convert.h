// Between step directories and safetensors files, without a job: what `fsdp-ckpt export` and
// `fsdp-ckpt import` do (docs/checkpoints.md "Tool: fsdp-ckpt"). One process, whole tensors: the
// model's parameters are held in fp32 memory at once (an 8B model needs 32 GB); inside a job,
// export_safetensors()/import_safetensors() move only each rank's shards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"

namespace fsdp::runtime::checkpoint {

// The parameters (not the optimizer state) of a step directory, whole and in saved order, each
// chunk's checksums verified.
std::vector<NamedTensor> read_step_dir_parameters(const std::string& step_dir);

// A weights-only step directory: step `step`, shard degree 1, no optimizer or training state, model
// config hash "" (what Checkpointer::load_model(), i.e. checkpoint.initial_load_path, reads).
// Written as <dir>.tmp-<nonce> and renamed: `dir` must not exist.
void write_weights_step_dir(const std::string& dir, const std::vector<NamedTensor>& tensors, int64_t step = 0,
                            int64_t checksum_block_bytes = 1 << 20);

// The number of key-value heads for the q/k permutation, from the shapes: head_dim = rows of wq /
// n_heads, n_kv_heads = rows of wk / head_dim (layer 0). Throws when the tensors are not a Llama's.
HfLlamaHeads hf_heads_from_shapes(const std::vector<NamedTensor>& tensors, int64_t n_heads);

}  // namespace fsdp::runtime::checkpoint
