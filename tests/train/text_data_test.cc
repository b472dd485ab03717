// Local text data: files read into documents (JSON lines, plain text, folders) with bad files refused by
// file:line, TorchTitan's data set names resolved to local paths, and the packed token stream the
// DataLoader shards over ranks and resumes from a saved position at another world size.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include <zlib.h>

#include "tests/train/tokenizer_fixture.h"
#include "train/bpe_tokenizer.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/text_files.h"

namespace fsdp::train {
namespace {

namespace fs = std::filesystem;

class TextDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fsdp_text_data_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const fs::path& rel, const std::string& text) {
    fs::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel, std::ios::binary) << text;
  }
  fs::path dir_;
};

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataFileError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST_F(TextDataTest, ReadsJsonLinesPlainTextAndFoldersInPathOrder) {
  write("b/part-1.jsonl", "{\"text\": \"second\", \"url\": \"x\"}\n\n{\"text\": \"third\\u00e9\"}\n");
  write("a.json", "[{\"text\": \"first\"}]");
  write("c.txt", "line one\r\n\nline three");
  write(".hidden/skip.txt", "never");
  write("notes.md", "never");
  EXPECT_EQ(read_text_documents(dir_.string()),
            (std::vector<std::string>{"first", "second", "third\xc3\xa9", "line one", "", "line three"}));
}

TEST_F(TextDataTest, BadFilesAreRefusedNamingFileAndLine) {
  const std::string name = "data.jsonl";
  EXPECT_EQ(refusal([&] { parse_text_documents("{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n", name, true); }),
            "data.jsonl:2: not UTF-8 (byte 14 of the line is 0xe9)");
  EXPECT_EQ(refusal([&] { parse_text_documents("{\"text\": \"ok\"}\n\n{\"body\": \"x\"}\n", name, true); }),
            "data.jsonl:3: no \"text\" field");
  EXPECT_EQ(refusal([&] { parse_text_documents("{\"text\": 3}\n", name, true); }), "data.jsonl:1: \"text\" is not a string");
  EXPECT_NE(refusal([&] { parse_text_documents("{\"text\": \"ok\"\n", name, true); }).find("data.jsonl:1: not JSON"),
            std::string::npos);
  EXPECT_EQ(refusal([&] { parse_text_documents(" \n\n", name, true); }), "data.jsonl: empty (no documents)");
  EXPECT_EQ(refusal([&] { parse_text_documents("", "x.txt", false); }), "x.txt: empty (no documents)");
  EXPECT_EQ(refusal([&] { parse_text_documents("ok\n\xff\n", "x.txt", false); }),
            "x.txt:2: not UTF-8 (byte 1 of the line is 0xff)");
  write("bad/a.jsonl", "{\"text\": \"fine\"}\n");
  write("bad/b.jsonl", "{\"title\": \"no text\"}\n");
  EXPECT_EQ(refusal([&] { read_text_documents((dir_ / "bad").string()); }), (dir_ / "bad/b.jsonl").string() + ":1: no \"text\" field");
}

TEST_F(TextDataTest, TorchTitanDatasetNamesResolveToLocalPaths) {
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  const std::string missing = refusal([] { text_dataset_files("c4_test", ""); });
  EXPECT_NE(missing.find("'tests/assets/c4_test' (from " + dir_.string() + "), which does not exist"), std::string::npos)
      << missing;
  write("tests/assets/c4_test/data.json", "{\"text\": \"a\"}\n");
  EXPECT_EQ(text_dataset_files("c4_test", ""), (std::vector<std::string>{"tests/assets/c4_test/data.json"}));
  // c4: a local copy of allenai/c4 keeps its en/c4-<split>.*.json.gz files; the split picks them.
  {
    fs::create_directories(dir_ / "c4/en");
    gzFile gz = gzopen((dir_ / "c4/en/c4-train.00000-of-01024.json.gz").c_str(), "wb");
    const std::string line = "{\"text\": \"gzipped\", \"url\": \"u\"}\n";
    gzwrite(gz, line.data(), static_cast<unsigned>(line.size()));
    gzclose(gz);
  }
  write("c4/en/c4-validation.00000-of-00008.json", "{\"text\": \"v\"}\n");
  EXPECT_EQ(text_dataset_files("c4", "c4"), (std::vector<std::string>{"c4/en/c4-train.00000-of-01024.json.gz"}));
  EXPECT_EQ(read_text_documents(text_dataset_files("c4", "c4")), (std::vector<std::string>{"gzipped"}));
  EXPECT_EQ(text_dataset_files("c4_validation", "c4"),
            (std::vector<std::string>{"c4/en/c4-validation.00000-of-00008.json"}));
  EXPECT_NE(refusal([] { text_dataset_files("c4", ""); }).find("'allenai/c4'"), std::string::npos);
  fs::current_path(cwd);
}

// The stream, written out independently: every document's BOS + tokens + EOS, concatenated, looped.
std::vector<Token> reference_stream(const BpeTokenizer& tok, const std::vector<std::string>& docs, size_t length) {
  std::vector<Token> s;
  for (size_t d = 0; s.size() < length; ++d) {
    const auto& text = docs[d % docs.size()];
    s.push_back(*tok.bos_id());
    const auto body = tok.encode(text);
    s.insert(s.end(), body.begin(), body.end());
    s.push_back(*tok.eos_id());
  }
  s.resize(length);
  return s;
}

std::vector<std::string> corpus() {
  std::vector<std::string> docs;
  for (int i = 0; i < 9; ++i) docs.push_back("document " + std::to_string(i) + std::string(static_cast<size_t>(i * 3), 'x') + " the end");
  return docs;
}

TEST_F(TextDataTest, RanksShareOnePackedStreamAndResumeAtAnotherWorldSize) {
  test_files::write_byte_level_tokenizer(dir_ / "tok", {{"t", "h"}, {"th", "e"}, {test_files::byte_char(' '), "the"}});
  const auto tok = load_tokenizer((dir_ / "tok").string());
  const auto docs = corpus();
  constexpr int64_t kSeq = 7, kGlobalRows = 4, kSteps = 6;
  const auto stream = reference_stream(*tok, docs, static_cast<size_t>((kSteps + 2) * kGlobalRows * (kSeq + 1)));
  const auto loader = [&](int64_t dp_size, int64_t dp_rank, int64_t accum = 1) {
    DataLoaderOptions o;
    o.local_batch_size = kGlobalRows / dp_size / accum;
    o.seq_len = kSeq;
    o.gradient_accumulation_steps = accum;
    o.dp_size = dp_size;
    o.dp_rank = dp_rank;
    return DataLoader(std::make_shared<const TextStreamSource>("c4_test", docs, tok), o);
  };
  // Two ranks: global row g of step s is window (s-1) * 4 + g of the stream; inputs and targets shift by one.
  auto r0 = loader(2, 0), r1 = loader(2, 1);
  for (int64_t s = 1; s <= 3; ++s) {
    for (auto* l : {&r0, &r1}) {
      const Batch b = l->next();
      for (int64_t row = 0; row < 2; ++row) {
        const int64_t g = (s - 1) * kGlobalRows + l->options().dp_rank * 2 + row;
        const auto w = stream.begin() + g * (kSeq + 1);
        EXPECT_TRUE(std::equal(w, w + kSeq, b.inputs.begin() + row * kSeq)) << "step " << s << " row " << g;
        EXPECT_TRUE(std::equal(w + 1, w + kSeq + 1, b.targets.begin() + row * kSeq)) << "step " << s << " row " << g;
      }
    }
  }
  // Saved after step 3 (rank 0's state is the run's); a 1-rank run with 2 micro-steps of 2 rows continues.
  const DataLoaderState saved = r0.state();
  EXPECT_EQ(saved.step, 4);
  EXPECT_EQ(saved.stream.token, 3 * kGlobalRows * (kSeq + 1));
  EXPECT_EQ(saved, r1.state());
  auto one = loader(1, 0, 2);
  one.restore(saved);
  for (int64_t s = 4; s <= kSteps; ++s) {
    for (int64_t micro = 0; micro < 2; ++micro) {
      const Batch b = one.next();
      for (int64_t row = 0; row < 2; ++row) {
        const int64_t g = (s - 1) * kGlobalRows + micro * 2 + row;
        const auto w = stream.begin() + g * (kSeq + 1);
        EXPECT_TRUE(std::equal(w, w + kSeq, b.inputs.begin() + row * kSeq)) << "step " << s << " row " << g;
      }
    }
  }
  // The saved document and offset (what lets a resume skip tokenizing what came before) are where the
  // offset falls among the documents' token counts.
  int64_t start = 0, doc = 0;
  while (true) {
    const auto size = static_cast<int64_t>(tok->encode_document(docs[static_cast<size_t>(doc) % docs.size()]).size());
    if (start + size > saved.stream.token) break;
    start += size;
    ++doc;
  }
  EXPECT_EQ(saved.stream.document, doc);
  EXPECT_EQ(saved.stream.offset, saved.stream.token - start);
}

// model.hf_assets_path: the model's vocabulary follows the tokenizer when unset; a missing folder is
// refused naming the key and the path.
TEST_F(TextDataTest, TheModelVocabularyFollowsTheTokenizer) {
  test_files::write_byte_level_tokenizer(dir_ / "tok", {{"a", "b"}});  // 256 + 1 + BOS + EOS = 259 ids
  // Our byte flavor's 256 ids are too few: the vocabulary becomes the tokenizer's. TorchTitan's
  // debugmodel (2048) already holds them and keeps its size.
  TrainConfig c = parse_train_config(
      "[model]\nflavor = 'debugmodel_byte'\nhf_assets_path = '" + (dir_ / "tok").string() + "'\n", "t.toml");
  c.validate(1);
  EXPECT_EQ(c.model_dims().vocab, 259);
  EXPECT_EQ(c.model_spec().dims.vocab, 259);
  TrainConfig titan = parse_train_config("[model]\nhf_assets_path = '" + (dir_ / "tok").string() + "'\n", "t.toml");
  titan.validate(1);
  EXPECT_EQ(titan.model_dims().vocab, 2048);
  TrainConfig missing = parse_train_config("[model]\nhf_assets_path = '" + (dir_ / "nope").string() + "'\n", "t.toml");
  try {
    missing.validate(1);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.hf_assets_path = '" + (dir_ / "nope").string() + "'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fsdp::train
