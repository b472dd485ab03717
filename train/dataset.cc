#include "train/dataset.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/splitmix.h"

namespace fsdp::train {
namespace {

// Counter-based, so any window's randomness is computed without replaying others.
uint64_t mix(uint64_t x) { return splitmix64(x); }

uint64_t window_key(const WindowId& id) {
  uint64_t h = mix(id.seed ^ 0x5eedULL);
  h = mix(h ^ static_cast<uint64_t>(id.step));
  h = mix(h ^ static_cast<uint64_t>(id.micro_step));
  return mix(h ^ static_cast<uint64_t>(id.row));
}

class Rng {
 public:
  explicit Rng(uint64_t state) : state_(state) {}
  uint64_t next() { return mix(state_++); }
  uint64_t below(uint64_t n) { return next() % n; }  // modulo bias is irrelevant at these sizes

 private:
  uint64_t state_;
};

}  // namespace

CorpusSource::CorpusSource(std::string_view text) : tokens_(ByteTokenizer().encode(text)) {}

void CorpusSource::fill_window(const WindowId& id, std::span<Token> out) const {
  const size_t n = tokens_.size();
  if (out.size() > n) {
    throw std::invalid_argument("tiny_corpus: a window of " + std::to_string(out.size()) +
                                " tokens (training.seq_len + 1) is longer than the corpus (" + std::to_string(n) +
                                " bytes)");
  }
  const size_t offset = static_cast<size_t>(window_key(id) % (n - out.size() + 1));
  std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(offset), out.size(), out.begin());
}

SyntheticSource::SyntheticSource(int64_t vocab_size, uint64_t seed) {
  if (vocab_size < 2) throw std::invalid_argument("synthetic dataset: vocab_size must be >= 2");
  perm_.resize(static_cast<size_t>(vocab_size));
  for (size_t i = 0; i < perm_.size(); ++i) perm_[i] = static_cast<Token>(i);
  Rng rng(mix(seed ^ 0x9e27a11eULL));
  for (size_t i = perm_.size() - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.below(i + 1)]);
}

void SyntheticSource::fill_window(const WindowId& id, std::span<Token> out) const {
  if (out.empty()) return;
  const uint64_t v = perm_.size();
  Rng rng(window_key(id));
  out[0] = static_cast<Token>(rng.below(v));
  for (size_t t = 1; t < out.size(); ++t) {
    const bool noise = rng.below(8) == 0;
    out[t] = noise ? static_cast<Token>(rng.below(v)) : successor(out[t - 1]);
  }
}

std::unique_ptr<TokenSource> make_token_source(std::string_view dataset, int64_t vocab_size, uint64_t seed) {
  if (dataset == "tiny_corpus") {
    if (vocab_size < ByteTokenizer::kVocabSize) {
      throw std::invalid_argument("tiny_corpus needs a vocabulary of at least 256 byte tokens, got " +
                                  std::to_string(vocab_size));
    }
    return std::make_unique<CorpusSource>();
  }
  if (dataset == "synthetic") return std::make_unique<SyntheticSource>(vocab_size, seed);
  throw std::invalid_argument("unknown dataset '" + std::string(dataset) + "' (tiny_corpus, synthetic)");
}

DataLoader::DataLoader(std::shared_ptr<const TokenSource> source, const DataLoaderOptions& options)
    : source_(std::move(source)), options_(options) {
  const auto& o = options_;
  if (source_ == nullptr) throw std::invalid_argument("DataLoader: no token source");
  if (o.local_batch_size < 1 || o.seq_len < 1 || o.gradient_accumulation_steps < 1 || o.dp_size < 1) {
    throw std::invalid_argument("DataLoader: local_batch_size (" + std::to_string(o.local_batch_size) +
                                "), seq_len (" + std::to_string(o.seq_len) + "), gradient_accumulation_steps (" +
                                std::to_string(o.gradient_accumulation_steps) + ") and dp_size (" +
                                std::to_string(o.dp_size) + ") must be >= 1");
  }
  if (o.dp_rank < 0 || o.dp_rank >= o.dp_size) {
    throw std::invalid_argument("DataLoader: dp_rank " + std::to_string(o.dp_rank) + " outside [0, " +
                                std::to_string(o.dp_size) + ")");
  }
}

void DataLoader::fill(int64_t step, int64_t micro_step, Batch& out) const {
  const int64_t b_rows = options_.local_batch_size;
  const int64_t t_len = options_.seq_len;
  out.step = step;
  out.micro_step = micro_step;
  out.batch_size = b_rows;
  out.seq_len = t_len;
  out.inputs.resize(static_cast<size_t>(b_rows * t_len));
  out.targets.resize(static_cast<size_t>(b_rows * t_len));
  std::vector<Token> window(static_cast<size_t>(t_len + 1));
  for (int64_t b = 0; b < b_rows; ++b) {
    const WindowId id{options_.seed, step, micro_step, options_.dp_rank * b_rows + b};
    source_->fill_window(id, window);
    const auto row = static_cast<std::ptrdiff_t>(b * t_len);
    std::copy_n(window.begin(), t_len, out.inputs.begin() + row);
    std::copy_n(window.begin() + 1, t_len, out.targets.begin() + row);
  }
}

void DataLoader::next(Batch& out) {
  fill(state_.step, state_.micro_step, out);
  if (++state_.micro_step == options_.gradient_accumulation_steps) {
    state_.micro_step = 0;
    ++state_.step;
  }
}

Batch DataLoader::next() {
  Batch b;
  next(b);
  return b;
}

void DataLoader::restore(const DataLoaderState& state) {
  if (state.step < 1 || state.micro_step < 0 || state.micro_step >= options_.gradient_accumulation_steps) {
    throw std::invalid_argument("DataLoader::restore: step " + std::to_string(state.step) + " micro_step " +
                                std::to_string(state.micro_step) + " out of range (gradient_accumulation_steps " +
                                std::to_string(options_.gradient_accumulation_steps) + ")");
  }
  state_ = state;
}

}  // namespace fsdp::train
