// Training data: token sources (the bundled corpus, a synthetic Markov task) and the data-parallel
// DataLoader. Every window is a pure function of (seed, step, micro-step, global row), so the union over
// data-parallel ranks of one step is exactly the batch a 1-rank run with local_batch_size x dp_size sees:
// rank r gets global rows r*B .. (r+1)*B-1. That is what makes N-rank training equal the 1-rank run.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "train/tokenizer.h"

namespace fsdp::train {

// The bundled English text (train/data/tiny_corpus.txt, embedded at build time; ~25 KB).
std::string_view tiny_corpus();

// Which window of the global batch: rows are numbered over the whole data-parallel world.
struct WindowId {
  uint64_t seed = 0;
  int64_t step = 1;        // 1-based optimizer step
  int64_t micro_step = 0;  // 0 .. gradient_accumulation_steps-1
  int64_t row = 0;         // global row: dp_rank * local_batch_size + local row
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::string_view name() const = 0;
  virtual int64_t vocab_size() const = 0;  // every token is in [0, vocab_size)
  // Writes window `id` (out.size() tokens) deterministically. Throws std::invalid_argument when the
  // source cannot supply windows that long.
  virtual void fill_window(const WindowId& id, std::span<Token> out) const = 0;
};

// Random windows of the byte-tokenized tiny corpus (vocabulary 256).
class CorpusSource final : public TokenSource {
 public:
  explicit CorpusSource(std::string_view text = tiny_corpus());
  std::string_view name() const override { return "tiny_corpus"; }
  int64_t vocab_size() const override { return ByteTokenizer::kVocabSize; }
  void fill_window(const WindowId& id, std::span<Token> out) const override;

 private:
  std::vector<Token> tokens_;
};

// A learnable task: each row starts at a random token, then follows a fixed random permutation of the
// vocabulary (next = perm[current]) except that 1 in 8 tokens is uniform noise. The permutation comes
// from the dataset seed, so the rule is the same in every window and the loss falls from ln(vocab)
// toward the noise floor (~1.07 nats at vocab 256).
class SyntheticSource final : public TokenSource {
 public:
  SyntheticSource(int64_t vocab_size, uint64_t seed);
  std::string_view name() const override { return "synthetic"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(perm_.size()); }
  void fill_window(const WindowId& id, std::span<Token> out) const override;
  Token successor(Token t) const { return perm_[static_cast<size_t>(t)]; }

 private:
  std::vector<Token> perm_;
};

// "tiny_corpus" or "synthetic" (training.dataset). vocab_size is the model's; the corpus needs >= 256.
std::unique_ptr<TokenSource> make_token_source(std::string_view dataset, int64_t vocab_size, uint64_t seed);

struct DataLoaderOptions {
  int64_t local_batch_size = 1;  // B: rows this rank gets per micro-step
  int64_t seq_len = 1;           // T
  int64_t gradient_accumulation_steps = 1;
  int64_t dp_rank = 0;  // sharding::Mesh::data_parallel_rank
  int64_t dp_size = 1;
  uint64_t seed = 0;
};

// One micro-batch: inputs and targets are (B, T) row-major, targets[b][t] = inputs[b][t+1] of the same
// (T+1)-token window, i.e. inputs = window[0..T), targets = window[1..T].
struct Batch {
  int64_t step = 0;
  int64_t micro_step = 0;
  int64_t batch_size = 0;  // B
  int64_t seq_len = 0;     // T
  std::vector<Token> inputs;
  std::vector<Token> targets;
};

// Where the loader is: the next batch it will return. Trivially copyable; store it in a checkpoint.
struct DataLoaderState {
  int64_t step = 1;
  int64_t micro_step = 0;
  friend bool operator==(const DataLoaderState&, const DataLoaderState&) = default;
};

class DataLoader {
 public:
  // Throws std::invalid_argument for non-positive sizes or a dp_rank outside [0, dp_size).
  DataLoader(std::shared_ptr<const TokenSource> source, const DataLoaderOptions& options);

  // The batch at state(), then advances (micro-step, and the step after the last micro-step).
  Batch next();
  // Same, reusing `out`'s buffers (no allocation after the first call).
  void next(Batch& out);
  // Pure: the batch of (step, micro_step) for this rank, whatever the state.
  void fill(int64_t step, int64_t micro_step, Batch& out) const;

  DataLoaderState state() const { return state_; }
  void restore(const DataLoaderState& state);  // throws std::invalid_argument when out of range

  const DataLoaderOptions& options() const { return options_; }
  const TokenSource& source() const { return *source_; }

 private:
  std::shared_ptr<const TokenSource> source_;
  DataLoaderOptions options_;
  DataLoaderState state_;
};

}  // namespace fsdp::train
