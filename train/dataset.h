// Training data: token sources (the bundled corpus, a synthetic Markov task, packed text documents) and
// the data-parallel DataLoader. Every window is a function of (step, micro-step, global row), so the
// union over data-parallel ranks of one step is exactly the batch a 1-rank run with local_batch_size x
// dp_size sees: rank r gets global rows r*B .. (r+1)*B-1. That is what makes N-rank training equal the
// 1-rank run. Random sources draw each window from (seed, step, micro-step, row); a text stream cuts
// window k of the run at token offset k * (seq_len + 1) of its one packed stream, so the position to
// save is a single offset and a resume at any world size continues the stream exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "train/tokenizer.h"

namespace fsdp::train {

class BpeTokenizer;

// The bundled English text (train/data/tiny_corpus.txt, embedded at build time; ~25 KB).
std::string_view tiny_corpus();

// Which window of the global batch: rows are numbered over the whole data-parallel world.
struct WindowId {
  uint64_t seed = 0;
  int64_t step = 1;        // 1-based optimizer step
  int64_t micro_step = 0;  // 0 .. gradient_accumulation_steps-1
  int64_t row = 0;         // global row: dp_rank * local_batch_size + local row
};

// A place in a packed token stream: its token offset and, so a resume need not re-tokenize what came
// before, the document it falls in (counted over epochs: epoch * documents + index) and the offset there.
struct StreamPosition {
  int64_t token = 0;
  int64_t document = 0;
  int64_t offset = 0;
  friend bool operator==(const StreamPosition&, const StreamPosition&) = default;
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::string_view name() const = 0;
  virtual int64_t vocab_size() const = 0;  // every token is in [0, vocab_size)
  // Random sources: writes window `id` (out.size() tokens) deterministically. Throws
  // std::invalid_argument when the source cannot supply windows that long.
  virtual void fill_window(const WindowId& id, std::span<Token> out) const = 0;

  // Stream sources fill by stream offset instead (the DataLoader numbers the windows).
  virtual bool is_stream() const { return false; }
  virtual void fill_stream(int64_t token, std::span<Token> out) const;
  virtual StreamPosition locate(int64_t token) const { return {token, 0, 0}; }
  // A hint that the stream continues at `p` (from a checkpoint): later reads start there, not at 0.
  virtual void seek(const StreamPosition& p) const { (void)p; }
};

// Random windows of the byte-tokenized tiny corpus (vocabulary 256), or of its tokens under another
// tokenizer.
class CorpusSource final : public TokenSource {
 public:
  explicit CorpusSource(std::string_view text = tiny_corpus());
  CorpusSource(std::vector<Token> tokens, int64_t vocab_size);
  std::string_view name() const override { return "tiny_corpus"; }
  int64_t vocab_size() const override { return vocab_size_; }
  void fill_window(const WindowId& id, std::span<Token> out) const override;

 private:
  std::vector<Token> tokens_;
  int64_t vocab_size_ = ByteTokenizer::kVocabSize;
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

// Documents tokenized as TorchTitan's HuggingFaceTextDataset does (BOS + text + EOS each), concatenated
// in order and looped over (its infinite training iterator): window k of the stream is tokens
// [k (T+1), (k+1)(T+1)). Documents are tokenized as reads reach them and dropped once behind, so memory
// holds the texts and the few documents the current windows span. Not thread-safe: one per rank.
class TextStreamSource final : public TokenSource {
 public:
  TextStreamSource(std::string name, std::vector<std::string> documents, std::shared_ptr<const BpeTokenizer> tokenizer);
  ~TextStreamSource() override;
  std::string_view name() const override { return name_; }
  int64_t vocab_size() const override;
  void fill_window(const WindowId& id, std::span<Token> out) const override;
  bool is_stream() const override { return true; }
  void fill_stream(int64_t token, std::span<Token> out) const override;
  StreamPosition locate(int64_t token) const override;
  void seek(const StreamPosition& p) const override;
  int64_t documents() const { return static_cast<int64_t>(documents_.size()); }

 private:
  struct Cache;
  void cover(int64_t begin, int64_t end) const;  // the cache holds tokens [begin, end)
  std::string name_;
  std::vector<std::string> documents_;
  std::shared_ptr<const BpeTokenizer> tokenizer_;
  std::unique_ptr<Cache> cache_;
};

// "tiny_corpus" or "synthetic" (training.dataset). vocab_size is the model's; the corpus needs >= 256.
std::unique_ptr<TokenSource> make_token_source(std::string_view dataset, int64_t vocab_size, uint64_t seed);

struct DataLoaderOptions {
  int64_t local_batch_size = 1;  // B: rows this rank gets per micro-step
  int64_t seq_len = 1;           // T
  int64_t gradient_accumulation_steps = 1;
  int64_t dp_rank = 0;  // spec::Mesh::data_parallel_rank
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

// Where the loader is: the next batch it will return and, for a stream source, where that batch's row 0
// starts in the stream. Trivially copyable; store it in a checkpoint.
struct DataLoaderState {
  int64_t step = 1;
  int64_t micro_step = 0;
  StreamPosition stream;
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

  DataLoaderState state() const;  // for a stream source, tokenizes up to the position it names
  // Pure: the state at (step, micro_step), wherever this loader is (from the position it started or was
  // restored at).
  DataLoaderState state_at(int64_t step, int64_t micro_step) const;
  // Throws std::invalid_argument when out of range. A stream source continues at state.stream whatever
  // the batch layout that saved it.
  void restore(const DataLoaderState& state);

  const DataLoaderOptions& options() const { return options_; }
  const TokenSource& source() const { return *source_; }

 private:
  // Stream offset of row 0 of (step, micro_step): origin_'s offset plus the windows since origin_.
  int64_t stream_offset(int64_t step, int64_t micro_step) const;

  std::shared_ptr<const TokenSource> source_;
  DataLoaderOptions options_;
  DataLoaderState state_;
  DataLoaderState origin_;  // the state the run started or resumed at
};

}  // namespace fsdp::train
