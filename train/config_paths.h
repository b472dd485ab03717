// What a configuration points at, checked before anything starts so that a file's every mistake comes
// in one report (TrainConfig::validate): the data set's files and the tokenizer read, model.hf_assets_path
// there, the checkpoint folder creatable, checkpoint.initial_load_path readable (and its safetensors
// rules), metrics.file and metrics.trace_file writable, parallelism.plan_file readable.
#pragma once

#include <string>
#include <vector>

#include "train/config.h"

namespace fsdp::train {

// Every problem of the paths, each naming its key and value, prefixed with the file's line when a file
// set the key ("llama3_8b.toml:38: training.dataset = 'c4' reads ..."); empty when all are usable.
std::vector<std::string> path_problems(const TrainConfig& config);
// path_problems() as one ConfigError; no-op when there are none. run_training_job checks again: a
// caller may have changed keys after validate().
void check_paths(const TrainConfig& config);

// The safetensors files checkpoint.initial_load_path names (a file, or with initial_load_in_hf every
// .safetensors of a folder, sorted: Hugging Face shards its checkpoints), or none when it names a
// checkpoint (a step directory or a checkpoint folder). Throws ConfigError for a folder with no
// .safetensors under initial_load_in_hf, and for safetensors asked for a whole training state.
std::vector<std::string> initial_safetensors_files(const CheckpointConfig& checkpoint);

}  // namespace fsdp::train
