#include "train/tokenizer.h"

#include <stdexcept>

namespace fsdp::train {

std::vector<Token> ByteTokenizer::encode(std::string_view text) const {
  std::vector<Token> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const Token> tokens) const {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= kVocabSize) {
      throw std::out_of_range("ByteTokenizer::decode: token " + std::to_string(tokens[i]) + " at position " +
                              std::to_string(i) + " is outside the byte vocabulary [0, 256)");
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return text;
}

}  // namespace fsdp::train
