// The byte-level BPE tokenizer against encodings computed independently here: the split patterns
// against std::regex (the same patterns over ASCII classes) on random text, and whole encodings against
// a brute-force GPT-2-style BPE (find the best-ranked pair, merge every occurrence, repeat) over a
// tokenizer.json this test writes (merges in both forms, byte fallback, added and special tokens), plus
// hand-checked cases and a tiktoken file.
#include "train/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <cstdio>

#include "common/json.h"
#include "train/pretokenizer.h"
#include "train/unicode_text.h"
#include "tests/train/tokenizer_fixture.h"

namespace fsdp::train {
namespace {

using test_files::byte_char;

std::vector<std::string> pieces_of(SplitPattern p, const std::string& text) {
  const std::u32string t = *unicode::decode_utf8(text);
  std::vector<std::string> out;
  for (auto v : split_isolated(p, t)) out.push_back(unicode::encode_utf8(v));
  return out;
}

// The pattern over ASCII (\p{L} = letters, \p{N} = digits), in ECMAScript syntax (no (?i:...): the
// contractions list both cases).
std::regex ascii_reference(SplitPattern p) {
  const std::string L = "[A-Za-z]", N = "[0-9]", S = "[ \\t\\n\\v\\f\\r]", O = "[^ \\t\\n\\v\\f\\rA-Za-z0-9]";
  if (p == SplitPattern::kGpt2) {
    return std::regex("'s|'t|'re|'ve|'m|'ll|'d| ?" + L + "+| ?" + N + "+| ?" + O + "+|" + S + "+(?!" + "[^ \\t\\n\\v\\f\\r])|" +
                      S + "+");
  }
  return std::regex("'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]|[^\\r\\nA-Za-z0-9]?" + L + "+|" + N +
                    "{1,3}| ?" + O + "+[\\r\\n]*|" + S + "*[\\r\\n]+|" + S + "+(?![^ \\t\\n\\v\\f\\r])|" + S + "+");
}

std::vector<std::string> reference_pieces(const std::regex& re, const std::string& text) {
  std::vector<std::string> out;
  size_t gap = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    const size_t at = static_cast<size_t>(it->position(0));
    if (at > gap) out.push_back(text.substr(gap, at - gap));
    out.push_back(it->str(0));
    gap = at + static_cast<size_t>(it->length(0));
  }
  if (gap < text.size()) out.push_back(text.substr(gap));
  return out;
}

std::string random_text(std::mt19937& rng, size_t n) {
  static const std::string alphabet = "aAbZz09 5 \t\n\r'sStTlLdDrReEvVmM.,!?-_(";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

TEST(SplitPattern, MatchesTheRegexOnRandomAsciiText) {
  std::mt19937 rng(7);
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    const std::regex re = ascii_reference(p);
    for (int trial = 0; trial < 3000; ++trial) {
      const std::string text = random_text(rng, 1 + rng() % 24);
      ASSERT_EQ(pieces_of(p, text), reference_pieces(re, text))
          << split_pattern_name(p) << " on " << json::quote(text);
    }
  }
}

// Against Python's `regex` module (the patterns as the files spell them, full Unicode classes) on random
// text drawn from letters, numbers and spaces of every kind; skipped where python3 has no `regex`.
TEST(SplitPattern, MatchesPythonRegexOnRandomUnicode) {
  const std::string command = "python3 " FSDP_SPLIT_REFERENCE " 7 5000 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  ::pclose(pipe);
  if (out.empty() || out.starts_with("no-regex")) GTEST_SKIP() << "python3 with the regex module is not installed";
  std::istringstream lines(out);
  size_t checked = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    const SplitPattern p = line.substr(0, t1) == "gpt2" ? SplitPattern::kGpt2 : SplitPattern::kLlama3;
    std::u32string text;
    std::istringstream code(line.substr(t1 + 1, t2 - t1 - 1));
    for (std::string cp; std::getline(code, cp, ',');) text.push_back(static_cast<char32_t>(std::stoul(cp, nullptr, 16)));
    std::string got;
    for (auto piece : split_isolated(p, text)) got += (got.empty() ? "" : "|") + std::to_string(piece.size());
    ASSERT_EQ(got, line.substr(t2 + 1)) << split_pattern_name(p) << " on " << json::quote(unicode::encode_utf8(text));
    ++checked;
  }
  EXPECT_EQ(checked, 10000u);
}

TEST(SplitPattern, HandCheckedCases) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces_of(SplitPattern::kGpt2, "Hello world's  end 123\n\n x"),
            (V{"Hello", " world", "'s", " ", " end", " 123", "\n\n", " x"}));
  EXPECT_EQ(pieces_of(SplitPattern::kLlama3, "I'M 12345 ok\r\n\r\n  hi"),
            (V{"I", "'M", " ", "123", "45", " ok", "\r\n\r\n", " ", " hi"}));
  // Unicode classes: é and 日本 are letters, ² and ٣ numbers, U+3000 a space.
  EXPECT_EQ(pieces_of(SplitPattern::kLlama3, "café 日本語\u3000x²٣!!\n"),
            (V{"café", " 日本語", "\u3000x", "²٣", "!!\n"}));
  EXPECT_EQ(pieces_of(SplitPattern::kGpt2, "café 日本語"), (V{"café", " 日本語"}));
  EXPECT_EQ(pieces_of(SplitPattern::kQwen2, "x 123"), (V{"x", " ", "1", "2", "3"}));
  EXPECT_EQ(find_split_pattern(split_pattern_text(SplitPattern::kLlama3)), SplitPattern::kLlama3);
  EXPECT_FALSE(find_split_pattern("\\w+"));
}

// ---- a tokenizer.json written here ----

struct Spec {
  std::vector<std::string> vocab;                          // id = position
  std::vector<std::pair<std::string, std::string>> merges;  // rank = position
};

// Every byte character but those of 'é' (0xC3 0xA9), which only byte fallback can encode; the <0xXX>
// tokens; then merges of common English pairs.
Spec make_spec() {
  Spec s;
  for (int b = 0; b < 256; ++b) {
    if (b != 0xC3 && b != 0xA9) s.vocab.push_back(byte_char(static_cast<unsigned char>(b)));
  }
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) s.vocab.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
  const std::string sp = byte_char(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {sp, "t"}, {sp + "t", "he"}, {"he", "ll"}, {"hell", "o"}, {sp, "w"}, {"o", "r"},
      {sp + "w", "or"}, {"l", "d"}, {sp + "wor", "ld"}, {"i", "n"}, {"in", "g"}, {"e", "r"}, {sp, "a"},
      {"a", "n"}, {"an", "d"}, {sp, "and"}, {"t", "h"}, {"th", "e"}, {sp, "s"}, {"s", "s"}, {"ss", "s"}};
  for (const auto& [a, b] : merges) {
    s.merges.push_back({a, b});
    if (std::find(s.vocab.begin(), s.vocab.end(), a + b) == s.vocab.end()) s.vocab.push_back(a + b);
  }
  return s;
}

std::string tokenizer_json(const Spec& s, const std::string& pre_tokenizer, const std::string& post_processor) {
  std::ostringstream j;
  j << "{\"version\":\"1.0\",\"added_tokens\":[";
  const int n = static_cast<int>(s.vocab.size());
  j << "{\"id\":" << n << ",\"content\":\"<|begin_of_text|>\",\"special\":true},"
    << "{\"id\":" << n + 1 << ",\"content\":\"<|end_of_text|>\",\"special\":true}],"
    << "\"normalizer\":null,\"pre_tokenizer\":" << pre_tokenizer << ",\"post_processor\":" << post_processor
    << ",\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
    << "\"byte_fallback\":true,\"ignore_merges\":false,\"vocab\":{";
  for (int i = 0; i < n; ++i) j << (i ? "," : "") << json::quote(s.vocab[static_cast<size_t>(i)]) << ":" << i;
  j << "},\"merges\":[";
  for (size_t r = 0; r < s.merges.size(); ++r) {
    const auto& [a, b] = s.merges[r];
    if (r % 2 == 0) {
      j << (r ? "," : "") << json::quote(a + " " + b);  // the "a b" form
    } else {
      j << ",[" << json::quote(a) << "," << json::quote(b) << "]";  // the pair form
    }
  }
  j << "]}}";
  return j.str();
}

const char* kConfig = R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>"}})";
const char* kByteLevel = R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";

// The brute-force reference: bytes to characters (missing ones to <0xXX>), then the classic loop.
std::vector<Token> reference_encode(const Spec& s, const std::vector<std::string>& pieces) {
  std::map<std::string, Token> id;
  for (size_t i = 0; i < s.vocab.size(); ++i) id[s.vocab[i]] = static_cast<Token>(i);
  std::vector<Token> out;
  for (const std::string& piece : pieces) {
    std::vector<std::string> sym;
    for (unsigned char b : piece) {
      const std::string c = byte_char(b);
      if (id.count(c)) {
        sym.push_back(c);
      } else {
        const auto u = unicode::decode_utf8(c);
        for (unsigned char cb : c) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", cb);
          sym.push_back(name);
        }
      }
    }
    while (true) {
      size_t best_rank = s.merges.size();
      for (size_t k = 0; k + 1 < sym.size(); ++k) {
        for (size_t r = 0; r < best_rank; ++r) {
          if (s.merges[r].first == sym[k] && s.merges[r].second == sym[k + 1]) best_rank = r;
        }
      }
      if (best_rank == s.merges.size()) break;
      std::vector<std::string> merged;
      for (size_t k = 0; k < sym.size(); ++k) {
        if (k + 1 < sym.size() && sym[k] == s.merges[best_rank].first && sym[k + 1] == s.merges[best_rank].second) {
          merged.push_back(sym[k] + sym[k + 1]);
          ++k;
        } else {
          merged.push_back(sym[k]);
        }
      }
      sym = merged;
    }
    for (const auto& t : sym) out.push_back(id.at(t));
  }
  return out;
}

TEST(BpeTokenizer, MatchesABruteForceBpeOnRandomText) {
  const Spec s = make_spec();
  const BpeTokenizer tok = BpeTokenizer::from_hf_json(tokenizer_json(s, kByteLevel, "null"), kConfig, "test.json");
  const std::regex re = ascii_reference(SplitPattern::kGpt2);
  const std::vector<std::string> words = {"hello", " hello", " world", "the", " the", " and", "sing", "ing",
                                          "  ", "\n", "s", "sss", "ssss", " a", "ll", "l", "!", "'s", "42", "theer"};
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    for (int w = 0; w < 1 + static_cast<int>(rng() % 8); ++w) text += words[rng() % words.size()];
    ASSERT_EQ(tok.encode(text), reference_encode(s, reference_pieces(re, text))) << json::quote(text);
    ASSERT_EQ(tok.decode(tok.encode(text)), text);
  }
}

TEST(BpeTokenizer, HandCheckedEncodingsByteFallbackAndSpecialTokens) {
  const Spec s = make_spec();
  const BpeTokenizer tok = BpeTokenizer::from_hf_json(tokenizer_json(s, kByteLevel, "null"), kConfig, "test.json");
  const auto id = [&](const std::string& t) { return *tok.token_to_id(t); };
  const std::string sp = byte_char(' ');
  // "hello" -> h e l l o -> he l l o -> he ll o -> hell o -> hello; " world" -> Ġw or l d -> Ġwor ld -> Ġworld.
  EXPECT_EQ(tok.encode("hello world"), (std::vector<Token>{id("hello"), id(sp + "world")}));
  // 'é' is bytes C3 A9, byte-level characters 'Ã' '©', which the vocabulary lacks: each falls back to
  // the bytes of its own UTF-8 form (C3 83, C2 A9), as Hugging Face's BPE does.
  EXPECT_EQ(tok.encode("é"), (std::vector<Token>{id("<0xC3>"), id("<0x83>"), id("<0xC2>"), id("<0xA9>")}));
  EXPECT_EQ(tok.decode(tok.encode("café the")), "café the");
  // Special tokens are matched in the text; the document gets BOS and EOS from tokenizer_config.json.
  const Token bos = id("<|begin_of_text|>"), eos = id("<|end_of_text|>");
  EXPECT_EQ(bos, static_cast<Token>(s.vocab.size()));
  EXPECT_EQ(tok.bos_id(), bos);
  EXPECT_EQ(tok.eos_id(), eos);
  // "the": (h, e) ranks before (t, h), so t + he stay apart; " the": Ġ t he -> Ġt he -> Ġthe.
  EXPECT_EQ(tok.encode("the<|end_of_text|> the"), (std::vector<Token>{id("t"), id("he"), eos, id(sp + "the")}));
  EXPECT_EQ(tok.encode_document("hello"), (std::vector<Token>{bos, id("hello"), eos}));
  EXPECT_EQ(tok.encode_document(""), (std::vector<Token>{bos, eos}));
  EXPECT_EQ(tok.vocab_size(), static_cast<int64_t>(s.vocab.size()) + 2);
}

TEST(BpeTokenizer, Llama3SplitTemplateAndNewSpecialTokens) {
  const Spec s = make_spec();
  const std::string pre = R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":)" +
                          json::quote(split_pattern_text(SplitPattern::kLlama3)) +
                          R"(},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})";
  const std::string post = R"({"type":"Sequence","processors":[{"type":"ByteLevel","trim_offsets":false},
    {"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
     "pair":[],"special_tokens":{"<|begin_of_text|>":{"id":"<|begin_of_text|>","ids":[)" +
                           std::to_string(s.vocab.size()) + R"(],"tokens":["<|begin_of_text|>"]}}}]})";
  // tokenizer_config.json names an EOS the files lack: it takes the next id (Hugging Face's rule).
  const std::string config = R"({"bos_token":"<|begin_of_text|>","eos_token":"<|eot_id|>"})";
  const BpeTokenizer tok = BpeTokenizer::from_hf_json(tokenizer_json(s, pre, post), config, "llama.json");
  const Token bos = static_cast<Token>(s.vocab.size()), eot = bos + 2;
  EXPECT_EQ(tok.eos_id(), eot);
  EXPECT_EQ(tok.vocab_size(), eot + 1);
  const auto id = [&](const std::string& t) { return *tok.token_to_id(t); };
  const std::string sp = byte_char(' ');
  // Llama 3 splits "the 1234" as the, Ġ, 123, 4; the template adds BOS once, the document EOS.
  EXPECT_EQ(tok.encode("the 1234"),
            (std::vector<Token>{bos, id("t"), id("he"), id(sp), id("1"), id("2"), id("3"), id("4")}));
  EXPECT_EQ(tok.encode_document("the"), (std::vector<Token>{bos, id("t"), id("he"), eot}));
}

TEST(BpeTokenizer, MissingCharactersWithoutFallbackAreDropped) {
  // TorchTitan's test tokenizer has no 'Ġ': Hugging Face drops the spaces (no unk, no byte fallback).
  std::ostringstream j;
  j << R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]},"pre_tokenizer":)" << kByteLevel << "}";
  const BpeTokenizer tok = BpeTokenizer::from_hf_json(j.str(), "", "tt.json");
  EXPECT_EQ(tok.encode("a b"), (std::vector<Token>{0, 1}));
  EXPECT_FALSE(tok.bos_id());
  EXPECT_EQ(tok.encode_document("a"), (std::vector<Token>{0}));
}

TEST(BpeTokenizer, RefusesWhatItCannotMatchNamingIt) {
  const auto refused = [](const std::string& doc, const std::string& want) {
    try {
      BpeTokenizer::from_hf_json(doc, "", "bad.json");
      ADD_FAILURE() << "accepted " << doc;
    } catch (const TokenizerError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    }
  };
  const std::string model = R"("model":{"type":"BPE","vocab":{"a":0},"merges":[]})";
  refused(R"({"pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated"},)" + model + "}",
          "Split pattern '\\w+' is not one this runtime matches");
  refused(R"({"normalizer":{"type":"NFKC"},)" + model + "}", "normalizer 'NFKC'");
  refused(R"({"model":{"type":"WordPiece","vocab":{}}})", "model.type 'WordPiece'");
  refused(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}})", "merge 0 ('a', 'b')");
  refused("{", "not JSON");
}

TEST(BpeTokenizer, TiktokenFileWithLlama3SpecialTokens) {
  // 256 byte tokens (rank = byte), then "he" 256, "ll" 257, "hell" 258, "hello" 259, " w" 260.
  const auto b64 = [](const std::string& bytes) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    uint32_t acc = 0;
    int bits = 0;
    for (unsigned char c : bytes) {
      acc = (acc << 8) | c, bits += 8;
      while (bits >= 6) out += a[(acc >> (bits -= 6)) & 63];
    }
    if (bits > 0) out += a[(acc << (6 - bits)) & 63];
    while (out.size() % 4) out += '=';
    return out;
  };
  std::string file;
  for (int b = 0; b < 256; ++b) file += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  int rank = 256;
  for (const char* t : {"he", "ll", "hell", "hello", " w"}) file += b64(t) + " " + std::to_string(rank++) + "\n";
  const BpeTokenizer tok = BpeTokenizer::from_tiktoken(file, "tokenizer.model");
  EXPECT_EQ(tok.vocab_size(), 261 + 256);
  EXPECT_EQ(tok.bos_id(), 261);
  EXPECT_EQ(tok.eos_id(), 262);
  EXPECT_EQ(tok.encode("hello world"), (std::vector<Token>{259, 260, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(tok.encode_document("hell"), (std::vector<Token>{261, 258, 262}));
  // Special tokens spelled in text are text (TorchTitan passes disallowed_special=()).
  EXPECT_EQ(tok.encode("<|begin_of_text|>").front(), '<');
  EXPECT_EQ(tok.decode(tok.encode("hello world")), "hello world");
  EXPECT_THROW(BpeTokenizer::from_tiktoken("QQ== x\n", "bad.model"), TokenizerError);
}

TEST(BpeTokenizer, LoadsAFolderAndNamesThePathLookedAt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("fsdp_bpe_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tokenizer_json(make_spec(), kByteLevel, "null");
  std::ofstream(dir / "tokenizer_config.json") << kConfig;
  const auto tok = load_tokenizer(dir.string());
  EXPECT_EQ(tok->encode_document("hello").size(), 3u);
  try {
    load_tokenizer((dir / "nowhere").string());
    ADD_FAILURE();
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "nowhere").string()), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fsdp::train
