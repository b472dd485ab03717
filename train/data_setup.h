// The tokenizer and the training data a configuration names (docs/training.md, "Tokenizers and data"):
//   model.tokenizer_path, else model.hf_assets_path, else (for TorchTitan's text data sets)
//   TorchTitan's default ./tests/assets/tokenizer; none of them: byte tokens (tiny_corpus, synthetic).
//   training.dataset c4_test / c4 / c4_validation read local files (text_files.h), tokenized and packed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "train/bpe_tokenizer.h"
#include "train/config.h"
#include "train/dataset.h"

namespace fsdp::train {

// The tokenizer path the configuration names ("" = byte tokens).
std::string tokenizer_path_of(const TrainConfig& config);
// That tokenizer, loaded once per path and process; null for byte tokens. Throws ConfigError naming the
// key and the path looked at.
std::shared_ptr<const BpeTokenizer> job_tokenizer(const TrainConfig& config);

// Part of resolve_keys(): checks the data keys and makes the model's vocabulary follow the tokenizer when
// it can be read (a missing data set or tokenizer is a path problem, train/config_paths.h). With
// model.vocab_size unset, a flavor vocabulary smaller than the tokenizer's becomes the tokenizer's (a
// larger one stays, as TorchTitan pads: debugmodel's 2048 over its test tokenizer's 2004 ids); a
// model.vocab_size set below the tokenizer's is refused naming both. Throws ConfigError.
void resolve_data_config(TrainConfig& config);

// The token source of this run (every rank reads the same documents; the DataLoader shards windows).
// Throws ConfigError naming the data set and, for a bad file, "FILE:LINE: what".
std::shared_ptr<const TokenSource> make_job_token_source(const TrainConfig& config, int64_t vocab_size, uint64_t seed);

}  // namespace fsdp::train
