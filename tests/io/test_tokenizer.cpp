// Tokenizers of a model directory: none there is no tokenizer; a real SentencePiece model (trained
// here with libsentencepiece's trainer) encodes with BOS as tokenizer_config.json says, decodes
// back to the text, skips ids beyond its vocabulary; a corrupt tokenizer.model is bad input; a
// tokenizer.json whose Python cannot start is a usage error saying what to install. (The Python
// `tokenizers` path is checked against Hugging Face itself in tests/reference/text_io.py.)
#include <gtest/gtest.h>

#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "io/tokenizer.hpp"
#include "tests/test_support.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = moerun::testing::scratch_dir("tokenizer");
    std::ofstream corpus(dir_ / "corpus.txt");
    for (int i = 0; i < 200; ++i) corpus << "the quick brown fox jumps over the lazy dog " << i % 7 << "\n";
    corpus.close();
    const auto st = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (dir_ / "corpus.txt").string() + " --model_prefix=" + (dir_ / "sp").string() +
        " --vocab_size=48 --model_type=bpe --character_coverage=1.0 --minloglevel=2");
    ASSERT_TRUE(st.ok()) << st.ToString();
    fs::create_directories(dir_ / "model");
    fs::copy_file(dir_ / "sp.model", dir_ / "model" / "tokenizer.model");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TokenizerTest, NoTokenizerFilesMeansNone) {
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(open_tokenizer((dir_ / "empty").string(), {}), nullptr);
}

TEST_F(TokenizerTest, SentencePieceEncodesWithBosAndDecodesBack) {
  auto tok = open_tokenizer((dir_ / "model").string(), {});
  ASSERT_NE(tok, nullptr);
  EXPECT_NE(tok->describe().find("sentencepiece"), std::string::npos);
  const std::string text = "the lazy fox jumps";
  const auto ids = tok->encode({text, "dog"});
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_GT(ids[0].size(), 2u);
  EXPECT_EQ(ids[0][0], 1) << "SentencePiece's BOS first (tokenizer_config.json absent: add_bos_token true)";
  std::vector<int32_t> with_extra = ids[0];
  with_extra.push_back(100000);  // beyond the tokenizer's vocabulary (a model's larger vocab): skipped
  const auto back = tok->decode({ids[0], with_extra});
  EXPECT_EQ(back[0], text);
  EXPECT_EQ(back[1], text);
}

// The bytes stop strings are matched on: each id's, concatenated, are the decoded text (the word
// boundary's space included; BOS, a control piece, none), bar the space Decode drops at the start.
TEST_F(TokenizerTest, SentencePieceTokenBytesJoinIntoTheDecodedText) {
  auto tok = open_tokenizer((dir_ / "model").string(), {});
  const std::string text = "the lazy fox jumps";
  const auto ids = tok->encode({text})[0];
  const std::vector<std::string> bytes = tok->token_bytes();
  std::string joined;
  for (int32_t id : ids) joined += bytes.at(static_cast<std::size_t>(id));
  EXPECT_EQ(bytes.at(static_cast<std::size_t>(ids[0])), "") << "BOS has no text";
  EXPECT_EQ(joined, " " + text);
}

TEST_F(TokenizerTest, AddBosTokenFalseIsHonoured) {
  std::ofstream(dir_ / "model" / "tokenizer_config.json") << R"({"add_bos_token": false})";
  auto tok = open_tokenizer((dir_ / "model").string(), {});
  const auto ids = tok->encode({"the lazy fox"});
  ASSERT_FALSE(ids[0].empty());
  EXPECT_NE(ids[0][0], 1);
}

TEST_F(TokenizerTest, CorruptModelIsBadInput) {
  std::ofstream(dir_ / "model" / "tokenizer.model", std::ios::trunc) << "not a protobuf";
  const std::string msg = moerun::testing::error_of([&] { open_tokenizer((dir_ / "model").string(), {}); }, ErrorKind::BadInput);
  EXPECT_NE(msg.find("not a SentencePiece model"), std::string::npos) << msg;
}

TEST_F(TokenizerTest, TokenizerJsonWithoutPythonIsAUsageErrorSayingWhatToInstall) {
  std::ofstream(dir_ / "model" / "tokenizer.json") << "{}";
  TokenizerConfig cfg;
  cfg.python = (dir_ / "no-such-python").string();
  cfg.timeout_s = 20;
  const std::string msg = moerun::testing::error_of([&] { open_tokenizer((dir_ / "model").string(), cfg); }, ErrorKind::Usage);
  EXPECT_NE(msg.find("pip install tokenizers"), std::string::npos) << msg;
}

}  // namespace
}  // namespace moerun::io
