// Byte-level tokenizer: token id = byte value, vocabulary 256. Lossless for any byte string (UTF-8 text
// becomes its bytes), so the tiny corpus needs no vocabulary file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::train {

using Token = int32_t;  // what the model's embedding lookup takes

class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;

  int64_t vocab_size() const { return kVocabSize; }
  std::vector<Token> encode(std::string_view text) const;
  // Throws std::out_of_range naming the position of a token outside [0, 256).
  std::string decode(std::span<const Token> tokens) const;
};

}  // namespace fsdp::train
