#include "train/tokenizer.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "train/dataset.h"

namespace fsdp::train {
namespace {

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const ByteTokenizer tok;
  const auto tokens = tok.encode(all);
  ASSERT_EQ(tokens.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tokens[static_cast<size_t>(b)], b);
  EXPECT_EQ(tok.decode(tokens), all);
  EXPECT_EQ(tok.vocab_size(), 256);
}

TEST(ByteTokenizer, RoundTripsUtf8AndTheCorpus) {
  const ByteTokenizer tok;
  const std::string text = "FSDP \xc3\xa9t\xc3\xa9 \xe2\x86\x92 ok";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.decode(tok.encode(tiny_corpus())), tiny_corpus());
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(ByteTokenizer, DecodeRejectsOutOfVocabulary) {
  const ByteTokenizer tok;
  const std::vector<Token> bad = {65, 256};
  try {
    tok.decode(bad);
    FAIL() << "expected std::out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("token 256 at position 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok.decode(std::vector<Token>{-1}), std::out_of_range);
}

}  // namespace
}  // namespace fsdp::train
