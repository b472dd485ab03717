#include "train/data_setup.h"

#include <map>
#include <mutex>

#include "train/text_files.h"

namespace fsdp::train {
namespace {

constexpr const char* kTorchTitanTokenizer = "./tests/assets/tokenizer";  // TorchTitan's hf_assets_path default

std::string tokenizer_key(const TrainConfig& c) {
  if (!c.model.tokenizer_path.empty()) return "model.tokenizer_path";
  if (!c.model.hf_assets_path.empty()) return "model.hf_assets_path";
  return "model.hf_assets_path (unset: TorchTitan's default for training.dataset = '" + c.training.dataset + "')";
}

}  // namespace

std::string tokenizer_path_of(const TrainConfig& c) {
  if (!c.model.tokenizer_path.empty()) return c.model.tokenizer_path;
  if (!c.model.hf_assets_path.empty()) return c.model.hf_assets_path;
  return is_text_dataset(c.training.dataset) ? kTorchTitanTokenizer : "";
}

std::shared_ptr<const BpeTokenizer> job_tokenizer(const TrainConfig& config) {
  const std::string path = tokenizer_path_of(config);
  if (path.empty()) return nullptr;
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const BpeTokenizer>> loaded;
  std::lock_guard lock(mu);
  if (const auto it = loaded.find(path); it != loaded.end()) return it->second;
  try {
    return loaded[path] = load_tokenizer(path);
  } catch (const TokenizerError& e) {
    throw ConfigError(tokenizer_key(config) + " = '" + path + "': " + e.what());
  }
}

void resolve_data_config(TrainConfig& config) {
  const auto& t = config.training;
  if (!t.dataset_path.empty() && !is_text_dataset(t.dataset)) {
    throw ConfigError("training.dataset_path = '" + t.dataset_path + "' is for the text data sets (c4_test, c4, "
                      "c4_validation); training.dataset = '" + t.dataset + "' is built in");
  }
  // The files themselves are path_problems()' (train/config_paths.h), reported with every other path's.
  std::shared_ptr<const BpeTokenizer> tokenizer;
  try {
    tokenizer = job_tokenizer(config);
  } catch (const ConfigError&) {
    return;  // a tokenizer that cannot be read is a path problem; the flavor's vocabulary stands meanwhile
  }
  if (!tokenizer) return;
  const int64_t needed = tokenizer->vocab_size();
  if (config.model.vocab_size) {
    if (*config.model.vocab_size < needed) {
      throw ConfigError("model.vocab_size = " + std::to_string(*config.model.vocab_size) + " is smaller than the " +
                        "tokenizer's " + std::to_string(needed) + " ids (" + tokenizer->source() +
                        "): set it to at least " + std::to_string(needed) + " or leave it unset");
    }
    return;
  }
  if (config.model_dims().vocab < needed) config.model.vocab_size = needed;
}

std::shared_ptr<const TokenSource> make_job_token_source(const TrainConfig& config, int64_t vocab_size, uint64_t seed) {
  const auto& t = config.training;
  const auto tokenizer = job_tokenizer(config);
  if (tokenizer && tokenizer->vocab_size() > vocab_size) {
    throw ConfigError("the tokenizer's " + std::to_string(tokenizer->vocab_size()) + " ids (" + tokenizer->source() +
                      ") do not fit the model's vocabulary of " + std::to_string(vocab_size));
  }
  if (is_text_dataset(t.dataset)) {
    try {
      return std::make_shared<const TextStreamSource>(
          t.dataset, read_text_documents(text_dataset_files(t.dataset, t.dataset_path)), tokenizer);
    } catch (const DataFileError& e) {
      throw ConfigError("training.dataset = '" + t.dataset + "': " + e.what());
    }
  }
  if (tokenizer && t.dataset == "tiny_corpus") {
    return std::make_shared<const CorpusSource>(tokenizer->encode_document(tiny_corpus()), tokenizer->vocab_size());
  }
  return make_token_source(t.dataset, vocab_size, seed);
}

}  // namespace fsdp::train
