#include "train/dataset.h"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>

#include "common/splitmix.h"
#include "train/bpe_tokenizer.h"

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

void TokenSource::fill_stream(int64_t, std::span<Token>) const {
  throw std::logic_error(std::string(name()) + " is not a stream source");
}

struct TextStreamSource::Cache {
  int64_t first_doc = 0;    // stream document of docs.front() (epoch * documents + index)
  int64_t first_token = 0;  // stream offset where it starts
  int64_t tokens = 0;       // held: [first_token, first_token + tokens)
  std::deque<std::vector<Token>> docs;
};

TextStreamSource::TextStreamSource(std::string name, std::vector<std::string> documents,
                                   std::shared_ptr<const BpeTokenizer> tokenizer)
    : name_(std::move(name)), documents_(std::move(documents)), tokenizer_(std::move(tokenizer)),
      cache_(std::make_unique<Cache>()) {
  if (documents_.empty()) throw std::invalid_argument(name_ + ": no documents");
  if (tokenizer_ == nullptr) throw std::invalid_argument(name_ + ": no tokenizer");
}

TextStreamSource::~TextStreamSource() = default;

int64_t TextStreamSource::vocab_size() const { return tokenizer_->vocab_size(); }

void TextStreamSource::fill_window(const WindowId&, std::span<Token>) const {
  throw std::logic_error(name_ + " is a stream source: windows come by stream offset");
}

void TextStreamSource::cover(int64_t begin, int64_t end) const {
  Cache& c = *cache_;
  if (begin < c.first_token) c = Cache{};  // behind the cache (or a seek): start the stream again
  const auto n = static_cast<int64_t>(documents_.size());
  int64_t empty_in_a_row = 0;
  const auto push_next = [&] {
    const int64_t doc = c.first_doc + static_cast<int64_t>(c.docs.size());
    std::vector<Token> tokens = tokenizer_->encode_document(documents_[static_cast<size_t>(doc % n)]);
    if (tokens.empty() && ++empty_in_a_row > n) {
      throw std::invalid_argument(name_ + ": no document has a token (empty texts and no BOS/EOS in the tokenizer)");
    }
    if (!tokens.empty()) empty_in_a_row = 0;
    c.tokens += static_cast<int64_t>(tokens.size());
    c.docs.push_back(std::move(tokens));
  };
  while (true) {  // drop documents that end at or before `begin`
    if (c.docs.empty()) {
      push_next();
      continue;
    }
    const auto front = static_cast<int64_t>(c.docs.front().size());
    if (c.first_token + front > begin) break;
    c.first_token += front;
    c.tokens -= front;
    ++c.first_doc;
    c.docs.pop_front();
  }
  while (c.first_token + c.tokens < end) push_next();
}

void TextStreamSource::fill_stream(int64_t token, std::span<Token> out) const {
  const auto end = token + static_cast<int64_t>(out.size());
  cover(token, end);
  int64_t at = cache_->first_token;
  size_t written = 0;
  for (const auto& doc : cache_->docs) {
    const auto size = static_cast<int64_t>(doc.size());
    const int64_t from = std::max(token, at), to = std::min(end, at + size);
    if (from < to) {
      std::copy(doc.begin() + (from - at), doc.begin() + (to - at), out.begin() + static_cast<std::ptrdiff_t>(written));
      written += static_cast<size_t>(to - from);
    }
    at += size;
    if (at >= end) break;
  }
}

StreamPosition TextStreamSource::locate(int64_t token) const {
  cover(token, token + 1);
  return StreamPosition{token, cache_->first_doc, token - cache_->first_token};
}

void TextStreamSource::seek(const StreamPosition& p) const {
  if (p.token < 0 || p.document < 0 || p.offset < 0 || p.offset > p.token) {
    throw std::invalid_argument(name_ + ": stream position token " + std::to_string(p.token) + " document " +
                                std::to_string(p.document) + " offset " + std::to_string(p.offset) + " is impossible");
  }
  *cache_ = Cache{p.document, p.token - p.offset, 0, {}};
}

CorpusSource::CorpusSource(std::string_view text) : tokens_(ByteTokenizer().encode(text)) {}
CorpusSource::CorpusSource(std::vector<Token> tokens, int64_t vocab_size)
    : tokens_(std::move(tokens)), vocab_size_(vocab_size) {}

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

int64_t DataLoader::stream_offset(int64_t step, int64_t micro_step) const {
  const auto& o = options_;
  const int64_t windows =
      ((step - origin_.step) * o.gradient_accumulation_steps + (micro_step - origin_.micro_step)) * o.dp_size *
      o.local_batch_size;
  if (windows < 0) {
    throw std::invalid_argument("DataLoader: step " + std::to_string(step) + "." + std::to_string(micro_step) +
                                " is before the position the stream continues from (step " +
                                std::to_string(origin_.step) + "." + std::to_string(origin_.micro_step) + ")");
  }
  return origin_.stream.token + windows * (o.seq_len + 1);
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
  const bool stream = source_->is_stream();
  const int64_t stream_base = stream ? stream_offset(step, micro_step) : 0;
  for (int64_t b = 0; b < b_rows; ++b) {
    const int64_t row = options_.dp_rank * b_rows + b;
    if (stream) {
      source_->fill_stream(stream_base + row * (t_len + 1), window);
    } else {
      source_->fill_window(WindowId{options_.seed, step, micro_step, row}, window);
    }
    const auto at = static_cast<std::ptrdiff_t>(b * t_len);
    std::copy_n(window.begin(), t_len, out.inputs.begin() + at);
    std::copy_n(window.begin() + 1, t_len, out.targets.begin() + at);
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

DataLoaderState DataLoader::state() const { return state_at(state_.step, state_.micro_step); }

DataLoaderState DataLoader::state_at(int64_t step, int64_t micro_step) const {
  DataLoaderState s{step, micro_step, {}};
  if (source_->is_stream()) s.stream = source_->locate(stream_offset(step, micro_step));
  return s;
}

void DataLoader::restore(const DataLoaderState& state) {
  if (state.step < 1 || state.micro_step < 0 || state.micro_step >= options_.gradient_accumulation_steps) {
    throw std::invalid_argument("DataLoader::restore: step " + std::to_string(state.step) + " micro_step " +
                                std::to_string(state.micro_step) + " out of range (gradient_accumulation_steps " +
                                std::to_string(options_.gradient_accumulation_steps) + ")");
  }
  state_ = state;
  origin_ = state;
  if (source_->is_stream()) source_->seek(state.stream);
}

}  // namespace fsdp::train
