// Tokenizer::max_bytes_per_token: text of B bytes never has fewer than B / max tokens (the server
// refuses a prompt far beyond the context on this bound, before tokenizing it).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/shared_dir.hpp"
#include "format/gguf.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::tokenizer {
namespace {

void expect_bound_holds(const Tokenizer& tok, const char* name) {
  const size_t max = tok.max_bytes_per_token();
  ASSERT_GT(max, 0u) << name;
  // The longest tokens' own texts, repeated; spaces (SPM's 3-byte U+2581 covers 1 byte); bytes of
  // every value; words.
  std::vector<std::string> texts = {std::string(5000, ' '), std::string(5000, 'a'), "Once upon a time, there was"};
  for (size_t id = 0; id < tok.vocab().size(); ++id)
    if (tok.vocab().tokens[id].size() + 2 >= max) texts.push_back(tok.vocab().tokens[id] + tok.vocab().tokens[id]);
  std::mt19937 rng(7);
  for (int i = 0; i < 50; ++i) {
    std::string s;
    for (int j = 0; j < 300; ++j) s += static_cast<char>(rng() % 256);
    texts.push_back(s);
  }
  for (const auto& text : texts) {
    for (const bool special : {false, true}) {
      const auto tokens = tok.encode(text, {.add_special = false, .parse_special = special});
      EXPECT_GE(tokens.size() * max, text.size()) << name << ": " << text.size() << " bytes, " << tokens.size()
                                                  << " tokens, max " << max;
    }
  }
}

TEST(MaxBytesPerToken, TextHasAtLeastBytesOverMaxTokens) {
  const Tokenizer spm(Vocab::from_gguf(
      gguf::File::open(test::repo_dir() / "tests" / "data" / "vocab" / "ggml-vocab-llama-spm.gguf")));
  expect_bound_holds(spm, "llama spm");
  const Tokenizer stories(Vocab::from_gguf(gguf::File::open(test::repo_dir() / "models" / "stories260K.gguf")));
  expect_bound_holds(stories, "stories260K");
}

// The BPE families and the other SPM vocabularies of ../shared/vocab (WPM has no bound).
TEST(MaxBytesPerToken, SharedVocabularies) {
  OKAPI_REQUIRE_DATA(shared_dir() / "vocab" / "ggml-vocab-gpt-2.gguf");
  for (const char* name : {"gpt-2", "falcon", "deepseek-coder", "deepseek-llm", "mpt", "refact", "phi-3"}) {
    const auto path = shared_dir() / "vocab" / (std::string("ggml-vocab-") + name + ".gguf");
    const Tokenizer tok(Vocab::from_gguf(gguf::File::open(path)));
    if (tok.max_bytes_per_token() == 0) continue;  // stripping or whitespace collapsing: no bound claimed
    expect_bound_holds(tok, name);
  }
  const Tokenizer bert(Vocab::from_gguf(gguf::File::open(shared_dir() / "vocab" / "ggml-vocab-bert-bge.gguf")));
  EXPECT_EQ(bert.max_bytes_per_token(), 0u);
}

TEST(MaxBytesPerToken, NoBoundWhereInputIsNormalizedAway) {
  Vocab v = Vocab::from_gguf(gguf::File::open(test::repo_dir() / "models" / "stories260K.gguf"));
  v.remove_extra_whitespaces = true;
  EXPECT_EQ(Tokenizer(v).max_bytes_per_token(), 0u);
}

}  // namespace
}  // namespace okapi::tokenizer
