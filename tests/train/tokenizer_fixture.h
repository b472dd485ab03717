// Tokenizer files the tests write: GPT-2's byte characters (listed here independently of the
// tokenizer's own table) and a small byte-level tokenizer.json folder.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "train/unicode_text.h"

namespace fsdp::train::test_files {

// GPT-2's byte-to-unicode character of byte `b`, as UTF-8.
inline std::string byte_char(unsigned char b) {
  std::vector<int> visible;
  for (int c = 33; c <= 126; ++c) visible.push_back(c);
  for (int c = 161; c <= 172; ++c) visible.push_back(c);
  for (int c = 174; c <= 255; ++c) visible.push_back(c);
  int extra = 0;
  for (int c = 0; c < 256; ++c) {
    const bool vis = std::find(visible.begin(), visible.end(), c) != visible.end();
    if (c == b) {
      std::string s;
      unicode::append_utf8(s, static_cast<char32_t>(vis ? c : 256 + extra));
      return s;
    }
    if (!vis) ++extra;
  }
  return {};
}

// `dir`/tokenizer.json: the 256 byte characters (ids 0..255), the merges given (each result a new id),
// <|begin_of_text|> and <|end_of_text|> as added tokens; tokenizer_config.json names them BOS and EOS.
// Vocabulary: 256 + merges + 2.
inline void write_byte_level_tokenizer(const std::filesystem::path& dir,
                                       const std::vector<std::pair<std::string, std::string>>& merges) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(byte_char(static_cast<unsigned char>(b)));
  for (const auto& [a, b] : merges) vocab.push_back(a + b);
  std::ofstream j(dir / "tokenizer.json");
  const size_t n = vocab.size();
  j << "{\"added_tokens\":[{\"id\":" << n << ",\"content\":\"<|begin_of_text|>\",\"special\":true},{\"id\":" << n + 1
    << ",\"content\":\"<|end_of_text|>\",\"special\":true}],\"normalizer\":null,"
    << "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    << "\"post_processor\":null,\"model\":{\"type\":\"BPE\",\"vocab\":{";
  for (size_t i = 0; i < n; ++i) j << (i ? "," : "") << json::quote(vocab[i]) << ":" << i;
  j << "},\"merges\":[";
  for (size_t r = 0; r < merges.size(); ++r) j << (r ? "," : "") << json::quote(merges[r].first + " " + merges[r].second);
  j << "]}}";
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token":"<|begin_of_text|>","eos_token":"<|end_of_text|>"})";
}

}  // namespace fsdp::train::test_files
