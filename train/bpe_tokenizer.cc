#include "train/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "train/unicode_text.h"

namespace fsdp::train {
namespace {

namespace fs = std::filesystem;

// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order, so every byte is one visible character (space is 'Ġ', U+0120).
const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

std::optional<unsigned char> char_to_byte(char32_t c) {
  static const std::unordered_map<char32_t, unsigned char> inverse = [] {
    std::unordered_map<char32_t, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[byte_to_char()[static_cast<size_t>(b)]] = static_cast<unsigned char>(b);
    return m;
  }();
  const auto it = inverse.find(c);
  if (it == inverse.end()) return std::nullopt;
  return it->second;
}

std::string byte_fallback_name(unsigned char b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError("tokenizer: cannot read '" + path.string() + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_word_char(char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_space_char(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string decode_base64(std::string_view s, const std::string& where) {
  auto value = [&](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    throw TokenizerError(where + ": '" + std::string(s) + "' is not base64");
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(value(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace

TokenizerError BpeTokenizer::error(const std::string& what) const { return TokenizerError(source_ + ": " + what); }

void BpeTokenizer::add_token(const std::string& text, Token id) {
  if (id < 0) throw error("token '" + text + "' has a negative id " + std::to_string(id));
  if (static_cast<size_t>(id) >= id_to_token_.size()) {
    id_to_token_.resize(static_cast<size_t>(id) + 1);
    is_byte_level_token_.resize(static_cast<size_t>(id) + 1, false);
  }
  id_to_token_[static_cast<size_t>(id)] = text;
  vocab_.emplace(text, id);
}

Token BpeTokenizer::register_added(AddedToken token) {
  if (token.content.empty()) return token.id;  // Hugging Face ignores an empty added token
  for (auto& a : added_) {
    if (a.content == token.content) {
      token.id = a.id;
      a = token;
      return a.id;
    }
  }
  added_.push_back(token);
  added_first_bytes_.set(static_cast<unsigned char>(token.content[0]));
  add_token(token.content, token.id);
  is_byte_level_token_[static_cast<size_t>(token.id)] = false;
  return token.id;
}

std::optional<Token> BpeTokenizer::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

BpeTokenizer BpeTokenizer::from_tiktoken(std::string_view model_text, const std::string& source) {
  BpeTokenizer t;
  t.source_ = source;
  t.kind_ = "tiktoken";
  t.byte_level_symbols_ = false;
  t.merge_by_rank_ = true;
  t.ignore_merges_ = true;
  PreTokenizerStep split;
  split.pattern = SplitPattern::kLlama3;
  t.steps_.push_back(split);
  size_t line_no = 0, count = 0;
  for (size_t pos = 0; pos < model_text.size();) {
    size_t end = model_text.find('\n', pos);
    if (end == std::string_view::npos) end = model_text.size();
    std::string_view line = model_text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = source + ":" + std::to_string(line_no);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) {
      throw TokenizerError(where + ": expected 'BASE64 RANK' (a tiktoken file; SentencePiece .model files are not supported)");
    }
    int64_t rank = -1;
    try {
      size_t used = 0;
      rank = std::stoll(std::string(line.substr(space + 1)), &used);
      if (used != line.size() - space - 1) rank = -1;
    } catch (const std::exception&) {
    }
    if (rank < 0 || rank > std::numeric_limits<Token>::max()) {
      throw TokenizerError(where + ": rank '" + std::string(line.substr(space + 1)) + "' is not a token id");
    }
    t.add_token(decode_base64(line.substr(0, space), where), static_cast<Token>(rank));
    ++count;
  }
  if (count == 0) throw TokenizerError(source + ": empty tiktoken file");
  for (int b = 0; b < 256; ++b) {
    if (!t.token_to_id(std::string(1, static_cast<char>(b)))) {
      throw TokenizerError(source + ": byte " + std::to_string(b) + " has no token (a tiktoken file ranks all 256)");
    }
  }
  // Llama 3's special tokens follow the ranks (TorchTitan's TikTokenizer); text that spells them is
  // encoded as text (disallowed_special=()), so they are decodable but never matched.
  std::vector<std::string> specials = {"<|begin_of_text|>", "<|end_of_text|>",
                                       "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                                       "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
                                       "<|start_header_id|>", "<|end_header_id|>",
                                       "<|reserved_special_token_4|>", "<|eot_id|>"};
  for (int i = 5; i < 256 - 5; ++i) specials.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  const Token base = static_cast<Token>(count);
  for (size_t i = 0; i < specials.size(); ++i) {
    const Token id = base + static_cast<Token>(i);
    if (static_cast<size_t>(id) >= t.id_to_token_.size()) {
      t.id_to_token_.resize(static_cast<size_t>(id) + 1);
      t.is_byte_level_token_.resize(static_cast<size_t>(id) + 1, false);
    }
    t.id_to_token_[static_cast<size_t>(id)] = specials[i];
  }
  t.bos_id_ = base;
  t.eos_id_ = base + 1;
  return t;
}

std::optional<BpeTokenizer::Merge> BpeTokenizer::find_merge(Token a, Token b) const {
  if (merge_by_rank_) {  // tiktoken: the pair's bytes together must be a token; its rank orders merges
    const auto it = vocab_.find(id_to_token_[static_cast<size_t>(a)] + id_to_token_[static_cast<size_t>(b)]);
    if (it == vocab_.end()) return std::nullopt;
    return Merge{static_cast<uint32_t>(it->second), it->second};
  }
  const auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
  if (it == merges_.end()) return std::nullopt;
  return it->second;
}

// One pre-token to ids: its symbols (characters, or bytes for tiktoken), then the lowest-ranked
// adjacent pair merged first, leftmost among equals, until no pair merges (Hugging Face's BPE::merge_word
// and tiktoken's byte_pair_merge agree on this order).
void BpeTokenizer::encode_piece(const std::string& piece, std::vector<Token>& out) const {
  if (ignore_merges_) {
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<Token> symbols;
  bool unk_pending = false;  // an unknown character's unk token, held back so the next one may fuse with it
  for (size_t i = 0; i < piece.size();) {
    size_t len = 1;
    if (!merge_by_rank_) {  // one UTF-8 character
      const auto lead = static_cast<unsigned char>(piece[i]);
      len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      len = std::min(len, piece.size() - i);
    }
    const std::string symbol = piece.substr(i, len);
    i += len;
    if (const auto it = vocab_.find(symbol); it != vocab_.end()) {
      if (unk_pending) symbols.push_back(*unk_id_), unk_pending = false;
      symbols.push_back(it->second);
      continue;
    }
    if (merge_by_rank_) throw error("byte without a token");  // checked at load
    if (byte_fallback_) {
      std::vector<Token> bytes;
      for (char c : symbol) {
        if (const auto b = token_to_id(byte_fallback_name(static_cast<unsigned char>(c)))) bytes.push_back(*b);
      }
      if (bytes.size() == symbol.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id_) {
      if (unk_pending && !fuse_unk_) symbols.push_back(*unk_id_);
      unk_pending = true;
    }
    // No fallback and no unk token: Hugging Face drops the character.
  }
  if (unk_pending) symbols.push_back(*unk_id_);
  while (symbols.size() > 1) {
    size_t best = symbols.size();
    Merge best_merge{std::numeric_limits<uint32_t>::max(), 0};
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      const auto m = find_merge(symbols[k], symbols[k + 1]);
      if (m && m->rank < best_merge.rank) best = k, best_merge = *m;
    }
    if (best == symbols.size()) break;
    symbols[best] = best_merge.id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeTokenizer::encode_segment(std::string_view segment, std::vector<Token>& out) const {
  if (segment.empty()) return;
  size_t bad = 0;
  auto text = unicode::decode_utf8(segment, &bad);
  if (!text) throw error("text is not UTF-8 (byte offset " + std::to_string(bad) + ")");
  std::vector<std::u32string> pieces{std::move(*text)};
  for (const auto& step : steps_) {
    std::vector<std::u32string> next;
    for (auto& p : pieces) {
      if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.add_prefix_space && !p.empty() && p[0] != U' ') {
        p.insert(p.begin(), U' ');
      }
      const bool split = step.kind == PreTokenizerStep::Kind::kSplit || step.use_regex;
      const SplitPattern pattern = step.kind == PreTokenizerStep::Kind::kSplit ? step.pattern : SplitPattern::kGpt2;
      if (!split) {
        next.push_back(std::move(p));
        continue;
      }
      for (auto v : split_isolated(pattern, p)) next.emplace_back(v);
    }
    pieces = std::move(next);
  }
  for (const auto& p : pieces) {
    const std::string bytes = unicode::encode_utf8(p);
    if (!byte_level_symbols_) {
      encode_piece(bytes, out);
      continue;
    }
    std::string mapped;
    for (char c : bytes) unicode::append_utf8(mapped, byte_to_char()[static_cast<unsigned char>(c)]);
    encode_piece(mapped, out);
  }
}

std::vector<Token> BpeTokenizer::encode(std::string_view text) const {
  std::vector<Token> body;
  // Added tokens first, leftmost-longest (Hugging Face's AddedVocabulary); the text between them goes
  // through the pre-tokenizer and the model.
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    if (!added_first_bytes_[static_cast<unsigned char>(text[i])]) {  // no added token starts here
      ++i;
      continue;
    }
    const AddedToken* best = nullptr;
    for (const auto& a : added_) {
      if (a.content.size() > text.size() - i || text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word && ((i > 0 && is_word_char(text[i - 1])) ||
                            (i + a.content.size() < text.size() && is_word_char(text[i + a.content.size()])))) {
        continue;
      }
      if (best == nullptr || a.content.size() > best->content.size()) best = &a;
    }
    if (best == nullptr) {
      ++i;
      continue;
    }
    size_t left = i, right = i + best->content.size();
    if (best->lstrip) {
      while (left > start && is_space_char(text[left - 1])) --left;
    }
    if (best->rstrip) {
      while (right < text.size() && is_space_char(text[right])) ++right;
    }
    encode_segment(text.substr(start, left - start), body);
    body.push_back(best->id);
    start = i = right;
  }
  encode_segment(text.substr(start), body);
  if (template_.empty()) return body;
  std::vector<Token> out;
  for (const auto& piece : template_) {
    if (piece) {
      out.push_back(*piece);
    } else {
      out.insert(out.end(), body.begin(), body.end());
    }
  }
  return out;
}

std::vector<Token> BpeTokenizer::encode_document(std::string_view text) const {
  std::vector<Token> ids = encode(text);
  if (bos_id_ && !adds_bos_) ids.insert(ids.begin(), *bos_id_);
  if (eos_id_ && !adds_eos_) ids.push_back(*eos_id_);
  return ids;
}

std::string BpeTokenizer::decode(std::span<const Token> tokens) const {
  std::string out;
  // Byte-level text (token characters and byte-fallback bytes, which spell those characters' UTF-8)
  // gathers here and is mapped back to bytes at the next added token and at the end.
  std::string symbols;
  const auto flush = [&] {
    const auto chars = unicode::decode_utf8(symbols);
    if (!chars) {
      out += symbols;
    } else {
      for (char32_t c : *chars) {
        if (const auto b = char_to_byte(c)) {
          out += static_cast<char>(*b);
        } else {
          unicode::append_utf8(out, c);
        }
      }
    }
    symbols.clear();
  };
  for (size_t k = 0; k < tokens.size(); ++k) {
    const Token id = tokens[k];
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || id_to_token_[static_cast<size_t>(id)].empty()) {
      throw std::out_of_range(source_ + ": token " + std::to_string(id) + " at position " + std::to_string(k) +
                              " is not in the vocabulary");
    }
    const std::string& text = id_to_token_[static_cast<size_t>(id)];
    const bool fallback = byte_fallback_ && text.size() == 6 && text.starts_with("<0x") && text.back() == '>' &&
                          std::isxdigit(static_cast<unsigned char>(text[3])) && std::isxdigit(static_cast<unsigned char>(text[4]));
    std::string& sink = byte_level_symbols_ && (fallback || is_byte_level_token_[static_cast<size_t>(id)]) ? symbols : out;
    if (&sink == &out) flush();
    if (fallback) {
      sink += static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16));
    } else {
      sink += text;
    }
  }
  flush();
  return out;
}

std::string BpeTokenizer::describe() const {
  std::ostringstream s;
  s << kind_ << " " << source_ << ": vocabulary " << vocab_size() << ", " << (merge_by_rank_ ? vocab_.size() : merges_.size())
    << (merge_by_rank_ ? " ranked tokens" : " merges") << ", bos " << (bos_id_ ? std::to_string(*bos_id_) : "none")
    << ", eos " << (eos_id_ ? std::to_string(*eos_id_) : "none");
  return s.str();
}

std::shared_ptr<const BpeTokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) throw TokenizerError("tokenizer: '" + path + "' does not exist");
  const auto load_json = [](const fs::path& file) {
    const fs::path config = file.parent_path() / "tokenizer_config.json";
    std::error_code e;
    const std::string config_text = fs::exists(config, e) ? read_file(config) : std::string();
    return std::make_shared<const BpeTokenizer>(BpeTokenizer::from_hf_json(read_file(file), config_text, file.string()));
  };
  const auto load_tiktoken = [](const fs::path& file) {
    return std::make_shared<const BpeTokenizer>(BpeTokenizer::from_tiktoken(read_file(file), file.string()));
  };
  if (!fs::is_directory(p, ec)) {
    return p.extension() == ".json" ? load_json(p) : load_tiktoken(p);
  }
  if (fs::exists(p / "tokenizer.json", ec)) return load_json(p / "tokenizer.json");
  for (const fs::path& candidate : {p / "original" / "tokenizer.model", p / "tokenizer.model"}) {
    if (fs::exists(candidate, ec)) return load_tiktoken(candidate);
  }
  throw TokenizerError("tokenizer: '" + path + "' has no tokenizer.json, original/tokenizer.model or tokenizer.model");
}

}  // namespace fsdp::train
