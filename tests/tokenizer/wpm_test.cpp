// WordPiece sessions against llama.cpp's bert-bge vectors (../shared/vocab) and small hand-made
// cases. The vocabulary is read here directly from GGUF metadata so only the session is tested.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::tokenizer {
namespace {

using test::read_file;

Vocab make_vocab(std::vector<std::string> tokens, TokenId unk) {
  Vocab vocab;
  vocab.kind = ModelKind::WPM;
  vocab.tokens = std::move(tokens);
  vocab.unk = unk;
  for (size_t i = 0; i < vocab.tokens.size(); ++i) vocab.token_to_id.emplace(vocab.tokens[i], static_cast<TokenId>(i));
  return vocab;
}

std::vector<TokenId> encode(const Vocab& vocab, std::string_view text) {
  std::vector<TokenId> ids;
  make_wpm_session(vocab)->encode_fragment(text, ids);
  return ids;
}

class WpmVectors : public ::testing::TestWithParam<std::string> {};  // folder of the .inp/.out pair

TEST_P(WpmVectors, BertBgeMatchesLlamaCpp) {
  OKAPI_REQUIRE_SHARED();
  const auto path = okapi::shared_dir() / "vocab" / "ggml-vocab-bert-bge.gguf";
  const auto file = gguf::File::open(path);
  const Vocab vocab = make_vocab(file.at("tokenizer.ggml.tokens").as_string_array(),
                                 static_cast<TokenId>(file.at("tokenizer.ggml.unknown_token_id").as_int()));
  const auto session = make_wpm_session(vocab);

  // test-tokenizer-0 layout: texts separated by "\n__ggml_vocab_test__\n", one id line per text.
  const auto vectors = okapi::shared_dir() / GetParam() / "ggml-vocab-bert-bge.gguf";
  const std::string inp = read_file(vectors.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::istringstream out(read_file(vectors.string() + ".out"));
  size_t cases = 0;
  size_t passed = 0;
  for (size_t start = 0; start < inp.size(); ++cases) {
    size_t end = inp.find(sep, start);
    if (end == std::string::npos) end = inp.size();
    const std::string text = inp.substr(start, end - start);
    start = end + sep.size();
    std::string line;
    ASSERT_TRUE(std::getline(out, line)) << "fewer output lines than inputs";
    std::istringstream line_ids(line);
    std::vector<TokenId> expected;
    for (TokenId id = 0; line_ids >> id;) expected.push_back(id);
    std::vector<TokenId> ids;
    session->encode_fragment(text, ids);
    if (ids == expected) {
      ++passed;
    } else {
      ADD_FAILURE() << "text '" << text << "' gave " << ::testing::PrintToString(ids) << " expected "
                    << ::testing::PrintToString(expected);
    }
  }
  EXPECT_GE(cases, 4u);
  EXPECT_EQ(passed, cases);
  std::cout << GetParam() << "/bert-bge: " << passed << "/" << cases << " vectors\n";
}

INSTANTIATE_TEST_SUITE_P(Folders, WpmVectors, ::testing::Values("vocab", "golden/public/tokenizer"));

TEST(WpmVectors, RandomBytesGiveIdsInRange) {
  OKAPI_REQUIRE_SHARED();
  const auto file = gguf::File::open(okapi::shared_dir() / "vocab" / "ggml-vocab-bert-bge.gguf");
  const Vocab vocab = make_vocab(file.at("tokenizer.ggml.tokens").as_string_array(),
                                 static_cast<TokenId>(file.at("tokenizer.ggml.unknown_token_id").as_int()));
  const auto session = make_wpm_session(vocab);
  std::mt19937 rng(3);
  for (int round = 0; round < 300; ++round) {
    std::string text(static_cast<size_t>(rng() % 40), '\0');
    for (auto& c : text) c = static_cast<char>(rng() % 3 == 0 ? rng() % 256 : "ab \xC3\xA9\xE4\xB8\xAD.!\t"[rng() % 12]);
    std::vector<TokenId> ids;
    session->encode_fragment(text, ids);
    for (const TokenId id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(static_cast<size_t>(id), vocab.size());
    }
  }
}

// "▁" marks a word start, as llama.cpp's converter writes BERT vocabularies.
const std::vector<std::string> kTinyVocab = {"[UNK]", "\xE2\x96\x81hello", "\xE2\x96\x81he", "llo", "\xE2\x96\x81,",
                                             "\xE2\x96\x81" "cafe", "\xE2\x96\x81\xE4\xB8\xAD", "\xE2\x96\x81x"};

TEST(Wpm, LongestMatchFirstThenContinues) {
  const Vocab vocab = make_vocab(kTinyVocab, 0);
  EXPECT_EQ(encode(vocab, "hello"), (std::vector<TokenId>{1}));
  EXPECT_EQ(encode(vocab, "  hello ,hello"), (std::vector<TokenId>{1, 4, 1}));  // punctuation is its own word
}

TEST(Wpm, LowercasesAndStripsAccentsOfPrecomposedLetters) {
  const Vocab vocab = make_vocab(kTinyVocab, 0);
  EXPECT_EQ(encode(vocab, "HeLLo"), (std::vector<TokenId>{1}));
  EXPECT_EQ(encode(vocab, "Caf\xC3\xA9"), (std::vector<TokenId>{5}));  // "Café" -> "cafe"
}

TEST(Wpm, UncoverableWordIsUnknown) {
  const Vocab vocab = make_vocab(kTinyVocab, 0);
  EXPECT_EQ(encode(vocab, "hellq hello"), (std::vector<TokenId>{0, 1}));
}

TEST(Wpm, ChineseCharactersAreSeparateWordsAndControlsVanish) {
  const Vocab vocab = make_vocab(kTinyVocab, 0);
  EXPECT_EQ(encode(vocab, "x\xE4\xB8\xADx"), (std::vector<TokenId>{7, 6, 7}));  // "x中x"
  EXPECT_EQ(encode(vocab, "hel\x01lo"), (std::vector<TokenId>{1}));
}

TEST(Wpm, InvalidUtf8DoesNotCrash) {
  const Vocab vocab = make_vocab(kTinyVocab, 0);
  EXPECT_EQ(encode(vocab, "hello\xFF\xC3"), (std::vector<TokenId>{1}));  // U+FFFD is dropped
}

}  // namespace
}  // namespace okapi::tokenizer
