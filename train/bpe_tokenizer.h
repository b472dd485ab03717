// Byte-level BPE tokenizers from the files models ship, loaded without Python or a download:
//  - Hugging Face `tokenizer.json` (model BPE with merges as "a b" strings or [a, b] pairs, the
//    ByteLevel and Split pre-tokenizers with the GPT-2 / Llama 3 / Qwen 2 patterns, byte_fallback,
//    unk_token, ignore_merges, added and special tokens, the TemplateProcessing post-processor), with
//    `tokenizer_config.json` beside it giving bos_token / eos_token as TorchTitan's HuggingFaceTokenizer
//    reads them (tokens it names that the vocabulary lacks get the next free ids);
//  - a tiktoken model file (base64 token, space, rank per line) with Llama 3's pattern and its 256
//    special tokens, as TorchTitan's TikTokenizer builds it.
// Anything else a file asks for (another model type, normalizer or pattern) is refused, naming it.
//
//   auto tok = load_tokenizer("./tests/assets/tokenizer");   // a folder, tokenizer.json, or a .model
//   std::vector<Token> ids = tok->encode_document(text);      // BOS + tokens + EOS, as TorchTitan packs
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "train/pretokenizer.h"
#include "train/tokenizer.h"

namespace fsdp::json {
class Value;
}

namespace fsdp::train {

// A tokenizer file that cannot be used: the message names the file and what is wrong.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class BpeTokenizer {
 public:
  // Parses a tokenizer.json text; `config_json` is tokenizer_config.json's text (empty: none). `source`
  // names the file in errors.
  static BpeTokenizer from_hf_json(std::string_view tokenizer_json, std::string_view config_json,
                                   const std::string& source);
  // Parses a tiktoken model file's text (Llama 3's special tokens follow its ranks).
  static BpeTokenizer from_tiktoken(std::string_view model_text, const std::string& source);

  // The tokens of `text` (valid UTF-8, else TokenizerError naming the byte offset), with whatever
  // the file's post-processor adds (Llama 3's tokenizer.json adds <|begin_of_text|>).
  std::vector<Token> encode(std::string_view text) const;
  // A training document as TorchTitan tokenizes it (encode(text, add_bos=True, add_eos=True)): BOS
  // first and EOS last when the tokenizer knows them, unless encode() already added them.
  std::vector<Token> encode_document(std::string_view text) const;
  // Text of `tokens` (byte-level and byte-fallback tokens back to bytes, added tokens verbatim).
  // Throws std::out_of_range for an id outside the vocabulary.
  std::string decode(std::span<const Token> tokens) const;

  // Ids are in [0, vocab_size()): the largest id + 1 (Hugging Face's count of vocabulary and added
  // tokens where ids are dense, as they are in the files models ship).
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<Token> bos_id() const { return bos_id_; }
  std::optional<Token> eos_id() const { return eos_id_; }
  std::optional<Token> token_to_id(std::string_view token) const;
  const std::string& source() const { return source_; }
  std::string describe() const;  // one line for the start-up log

 private:
  struct AddedToken {
    std::string content;
    Token id = 0;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool single_word = false;
  };
  struct PreTokenizerStep {
    enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
    SplitPattern pattern = SplitPattern::kGpt2;  // kSplit, and kByteLevel with use_regex
    bool use_regex = false;                      // kByteLevel
    bool add_prefix_space = false;               // kByteLevel
  };
  struct Merge {
    uint32_t rank;
    Token id;
  };

  BpeTokenizer() = default;
  TokenizerError error(const std::string& what) const;  // "<source_>: what"
  // tokenizer.json's parts, in the order from_hf_json reads them (bpe_tokenizer_hf.cc); each throws
  // error(...) naming what it refuses.
  size_t read_hf_model(const json::Value& model);
  void read_hf_pre_tokenizer(const json::Value& doc);
  void read_hf_special_tokens(const json::Value& doc, std::string_view config_json, size_t model_vocab);
  void read_hf_post_processor(const json::Value& doc);
  void add_token(const std::string& text, Token id);
  Token register_added(AddedToken token);  // returns its id (existing or new)
  void encode_segment(std::string_view segment, std::vector<Token>& out) const;
  void encode_piece(const std::string& piece, std::vector<Token>& out) const;
  std::optional<Merge> find_merge(Token a, Token b) const;

  std::string source_;
  bool byte_level_symbols_ = true;  // symbols are GPT-2 byte-to-unicode characters (false: raw bytes)
  bool merge_by_rank_ = false;      // tiktoken: a pair merges into the token of its concatenation
  bool ignore_merges_ = false;      // a piece that is itself a token is that token
  bool byte_fallback_ = false;      // a missing symbol becomes its bytes' <0xXX> tokens
  std::optional<Token> unk_id_;
  bool fuse_unk_ = false;
  std::vector<PreTokenizerStep> steps_;
  std::unordered_map<std::string, Token> vocab_;  // model vocabulary and added tokens
  std::vector<std::string> id_to_token_;          // "" for ids no token has
  std::vector<bool> is_byte_level_token_;         // decode maps its characters back to bytes
  std::unordered_map<uint64_t, Merge> merges_;    // (a << 32 | b) -> rank, merged id
  std::vector<AddedToken> added_;                 // matched in the text before pre-tokenization
  std::bitset<256> added_first_bytes_;            // first bytes of added tokens: where a match can start
  std::vector<std::optional<Token>> template_;    // post-processor "single": ids, nullopt for $A
  std::optional<Token> bos_id_, eos_id_;
  bool adds_bos_ = false, adds_eos_ = false;      // encode("") already holds them (TorchTitan's test)
  std::string kind_;                              // "tokenizer.json" or "tiktoken"
};

// Loads `path`: a folder (tokenizer.json, else original/tokenizer.model or tokenizer.model as tiktoken;
// tokenizer_config.json beside tokenizer.json), a tokenizer.json file, or a tiktoken file. Throws
// TokenizerError naming the path looked at when nothing usable is there.
std::shared_ptr<const BpeTokenizer> load_tokenizer(const std::string& path);

}  // namespace fsdp::train
