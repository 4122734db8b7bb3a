// Pre-tokenizer splits per family, including the families without vectors in ../shared (llama3,
// qwen2, ...): expected splits follow the regexes' semantics as llama.cpp runs them.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace okapi::tokenizer {
namespace {

using Words = std::vector<std::string>;

Words split(std::string_view family, std::string_view text) {
  return PreTokenizer(pre_tokenizer_family(family).regexes).split(text);
}

TEST(PreTokenizer, EveryFamilyCompiles) {
  for (const auto& name : known_pre_tokenizers()) {
    EXPECT_NO_THROW(PreTokenizer(pre_tokenizer_family(name).regexes)) << name;
  }
  EXPECT_THROW(pre_tokenizer_family("no-such-family"), okapi::Error);
  EXPECT_THROW(PreTokenizer({"(unclosed"}), okapi::Error);
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split("gpt-2", "I've I'VE"), (Words{"I", "'ve", " I", "'", "VE"}));  // case-sensitive contractions
  EXPECT_EQ(split("gpt-2", "12345 .Hi"), (Words{"12345", " .", "Hi"}));
  // \s+(?!\S): a run of spaces leaves its last one to the next word.
  EXPECT_EQ(split("gpt-2", "a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(split("gpt-2", "a\n\nb"), (Words{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("gpt-2", "a   "), (Words{"a", "   "}));
  EXPECT_EQ(split("gpt-2", ""), Words{});
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split("llama-bpe", "I've I'VE"), (Words{"I", "'ve", " I", "'VE"}));  // (?i:'ve)
  EXPECT_EQ(split("llama-bpe", "12345"), (Words{"123", "45"}));                   // \p{N}{1,3}
  EXPECT_EQ(split("llama-bpe", ".Hello!!\n\nx"), (Words{".Hello", "!!\n\n", "x"}));
  EXPECT_EQ(split("llama-bpe", "a \n\n b"), (Words{"a", " \n\n", " b"}));  // \s*[\r\n]+
  EXPECT_EQ(split("llama-bpe", "a   b"), (Words{"a", "  ", " b"}));
  EXPECT_TRUE(pre_tokenizer_family("llama-bpe").ignore_merges);
  EXPECT_FALSE(pre_tokenizer_family("gpt-2").ignore_merges);
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "x 2024!"), (Words{"x", " ", "2", "0", "2", "4", "!"}));
}

TEST(PreTokenizer, StarcoderSplitsDigitsFirst) {
  EXPECT_EQ(split("starcoder", "ab 123"), (Words{"ab", " ", "1", "2", "3"}));
}

TEST(PreTokenizer, RegexesApplyInTurnToEachPiece) {
  // deepseek-coder: "[\r\n]" first, so the next regex's \s? cannot take the newline.
  EXPECT_EQ(split("deepseek-coder", "\nabc"), (Words{"\n", "abc"}));
  // falcon: punctuation runs first, then gpt-2, then digit triples.
  EXPECT_EQ(split("falcon", "1234567,x"), (Words{"123", "456", "7", ",", "x"}));
}

TEST(PreTokenizer, EmptyMatchesDelimitPiecesLikeStdRegexIterator) {
  // Empty matches at 0 and 1 split "a" from "b"; the gap pieces are kept, empty words are not.
  EXPECT_EQ(PreTokenizer({"x*"}).split("abxxc"), (Words{"a", "b", "xx", "c"}));
}

TEST(PreTokenizer, WhitespaceIsLlamaCppsSet) {
  // U+0085 is whitespace to llama.cpp (not to PCRE2's \s): it is not glued to a symbol run.
  EXPECT_EQ(split("gpt-2", "!\xC2\x85"), (Words{"!", "\xC2\x85"}));
  // U+3000 (ideographic space) likewise ends a symbol run.
  EXPECT_EQ(split("gpt-2", "!\xE3\x80\x80"), (Words{"!", "\xE3\x80\x80"}));
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(split("gpt-2", "a\xFF" "b"), (Words{"a", "\xEF\xBF\xBD", "b"}));
  EXPECT_EQ(split("gpt-2", "a\xE2\x82"), (Words{"a", "\xEF\xBF\xBD\xEF\xBF\xBD"}));  // truncated sequence
  EXPECT_EQ(split("gpt-2", "\xED\xA0\x80"), (Words{"\xED\xA0\x80"}));  // a surrogate passes through as llama.cpp
}

TEST(PreTokenizer, RandomBytesRoundTripThroughTheDecoder) {
  std::mt19937 rng(7);
  for (const auto& family : known_pre_tokenizers()) {
    const PreTokenizer pre(pre_tokenizer_family(family).regexes);
    for (int round = 0; round < 20; ++round) {
      std::string text(static_cast<size_t>(rng() % 64), '\0');
      for (auto& c : text) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : " \n\ta1.'Z\xC3\xA9"[rng() % 10]);
      std::string joined;
      for (const auto& word : pre.split(text)) {
        EXPECT_FALSE(word.empty()) << family;
        joined += word;
      }
      const auto cpts = utf8_to_codepoints(text);
      EXPECT_EQ(joined, codepoints_to_utf8(cpts.data(), cpts.size())) << family;
    }
  }
}

// A 4 MiB input splits into words that join back to it (its speed: bench/tokenizer_scaling_bench.cpp).
TEST(PreTokenizer, LargeInputSplitsCompletely) {
  std::string text;
  while (text.size() < (4u << 20)) text += "The quick brown fox, 12345 times!   \n\n\tÜber café 東京 🦙 'll ";
  const auto words = split("llama-bpe", text);
  EXPECT_GT(words.size(), text.size() / 10);
  size_t joined = 0;
  for (const auto& w : words) joined += w.size();
  EXPECT_EQ(joined, text.size());
}

}  // namespace
}  // namespace okapi::tokenizer
