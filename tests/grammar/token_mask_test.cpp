// Token masks over real vocabularies: the trie walk equals a brute-force check of every token, and
// a sampler restricted to the mask only ever produces text the grammar accepts.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/shared_dir.hpp"
#include "format/gguf.hpp"
#include "grammar/grammar.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::grammar {
namespace {

// Any JSON object, the grammar users get in examples/ (as llama.cpp's grammars/json.gbnf).
const std::string kJsonGrammar = test::read_file(test::repo_dir() / "examples" / "grammars" / "json.gbnf");

// Multi-byte characters only: byte tokens and pieces that split characters end mid-character.
const char* kUtf8Grammar = R"(root ::= [α-ω日本é]+ ("." | "!" [ab]{1,3}))";

tokenizer::Tokenizer load(const std::filesystem::path& path) {
  return tokenizer::Tokenizer(tokenizer::Vocab::from_gguf(gguf::File::open(path)));
}

std::filesystem::path spm_vocab() { return test::repo_dir() / "tests" / "data" / "vocab" / "ggml-vocab-llama-spm.gguf"; }
std::filesystem::path gpt2_vocab() { return okapi::shared_dir() / "vocab" / "ggml-vocab-gpt-2.gguf"; }

// The mask by brute force: each token's text tried on the matcher, one by one.
std::vector<uint8_t> brute_force(const TokenIndex& index, const Matcher& matcher) {
  std::vector<uint8_t> mask(index.n_vocab(), 0);
  for (size_t id = 0; id < index.n_vocab(); ++id) {
    const auto token = static_cast<TokenId>(id);
    if (index.is_end_of_generation(token)) {
      mask[id] = matcher.can_end();
    } else if (!index.piece(token).empty()) {
      mask[id] = matcher.allows(index.piece(token));
    }
  }
  return mask;
}

void expect_masks_match(const TokenIndex& index, const std::string& gbnf, const std::vector<std::string>& prefixes) {
  const auto grammar = Grammar::parse(gbnf);
  std::vector<uint8_t> mask;
  for (const std::string& prefix : prefixes) {
    SCOPED_TRACE("after: " + prefix);
    Matcher matcher(grammar);
    ASSERT_TRUE(matcher.accept(prefix));
    index.allowed(matcher, mask);
    const std::vector<uint8_t> expected = brute_force(index, matcher);
    size_t n_allowed = 0, mismatches = 0;
    for (size_t id = 0; id < mask.size(); ++id) {
      n_allowed += mask[id];
      if (mask[id] != expected[id] && ++mismatches <= 5) {
        ADD_FAILURE() << "token " << id << " '" << index.piece(static_cast<TokenId>(id)) << "': mask " << int(mask[id])
                      << ", brute force " << int(expected[id]);
      }
      // The single-token check agrees too.
      if (id % 31 == 0) {
        EXPECT_EQ(index.allows(matcher, static_cast<TokenId>(id)), expected[id] != 0) << "token " << id;
      }
    }
    EXPECT_EQ(mismatches, 0u);
    EXPECT_GT(n_allowed, 0u);
  }
}

const std::vector<std::string> kJsonPrefixes = {
    "", "{\"ke", "{\"key\"", "{\"key\": -0.5e", "{\"a\": [tr", "{\"a\": \"caf\xC3", "{\"a\": \"\\u00",
    "{\"a\": {\"b\": [1, {\"c\": null}]", "{\"a\": 1}"};
const std::vector<std::string> kUtf8Prefixes = {"", "\xCE", "\xE6\x97", "\xCE\xB1!"};

TEST(TokenMask, EqualsBruteForceSpm) {
  const auto tok = load(spm_vocab());
  const TokenIndex index(tok);
  ASSERT_EQ(index.n_vocab(), tok.vocab().size());
  expect_masks_match(index, kJsonGrammar, kJsonPrefixes);
  expect_masks_match(index, kUtf8Grammar, kUtf8Prefixes);
}

TEST(TokenMask, EqualsBruteForceGpt2) {
  OKAPI_REQUIRE_DATA(gpt2_vocab());
  const auto tok = load(gpt2_vocab());
  const TokenIndex index(tok);
  expect_masks_match(index, kJsonGrammar, kJsonPrefixes);
  expect_masks_match(index, kUtf8Grammar, kUtf8Prefixes);
}

TEST(TokenMask, EndOfGenerationOnlyWhenComplete) {
  const auto tok = load(spm_vocab());
  const TokenIndex index(tok);
  const TokenId eos = tok.vocab().eos;
  ASSERT_GE(eos, 0);
  EXPECT_TRUE(index.is_end_of_generation(eos));
  const auto grammar = Grammar::parse(R"(root ::= "yes" | "no")");
  Matcher m(grammar);
  std::vector<uint8_t> mask;
  index.allowed(m, mask);
  EXPECT_EQ(mask[static_cast<size_t>(eos)], 0);
  EXPECT_FALSE(index.advance(m, eos));
  ASSERT_TRUE(m.accept("no"));
  index.allowed(m, mask);
  EXPECT_EQ(mask[static_cast<size_t>(eos)], 1);
  size_t others = 0;
  for (uint8_t a : mask) others += a;
  EXPECT_EQ(others, 1u);  // finished: only the end
  EXPECT_TRUE(index.advance(m, eos));
}

TEST(TokenMask, TokenElementsMatchById) {
  const auto tok = load(spm_vocab());
  const TokenIndex index(tok);
  const auto grammar = Grammar::parse(R"(root ::= <[450]> (!<[29889]>)* <[29889]>)");
  Matcher m(grammar);
  std::vector<uint8_t> mask;
  index.allowed(m, mask);
  size_t n = 0;
  for (uint8_t a : mask) n += a;
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(mask[450], 1);
  ASSERT_TRUE(index.advance(m, 450));
  index.allowed(m, mask);
  EXPECT_EQ(mask[29889], 1);
  EXPECT_EQ(mask[100], 1);
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(index.advance(m, 100));
  ASSERT_TRUE(index.advance(m, 29889));
  EXPECT_TRUE(m.can_end());
}

// Random logits, the best allowed token wins (a uniform pick among the allowed), until the end.
// Returns whether the sample ended (chose an end-of-generation token).
bool sample_and_check(const TokenIndex& index, const std::string& gbnf, uint32_t seed, int max_tokens) {
  const auto grammar = Grammar::parse(gbnf);
  Matcher matcher(grammar);
  MaskCache cache(index);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> logit(0.0f, 1.0f);
  std::string text;
  bool ended = false;
  for (int step = 0; step < max_tokens && !ended; ++step) {
    const std::vector<uint8_t>& mask = cache.mask(matcher);
    TokenId best = -1;
    float best_logit = -1.0f;
    for (size_t id = 0; id < mask.size(); ++id) {
      if (!mask[id]) continue;
      float l = logit(rng);
      // Lean towards ending once it is allowed, so that samples finish.
      if (index.is_end_of_generation(static_cast<TokenId>(id))) l += 0.5f;
      if (l > best_logit) {
        best_logit = l;
        best = static_cast<TokenId>(id);
      }
    }
    EXPECT_GE(best, 0) << "no token allowed after: " << text;
    if (best < 0) return false;
    if (index.is_end_of_generation(best)) {
      EXPECT_TRUE(matcher.can_end());
      ended = true;
      break;
    }
    const bool advanced = index.advance(matcher, best);
    EXPECT_TRUE(advanced) << "masked token refused: " << index.piece(best);
    if (!advanced) return false;
    text += index.piece(best);
    Matcher fresh(grammar);
    EXPECT_TRUE(fresh.accept(text)) << "rejected bytes: " << text;
  }
  Matcher fresh(grammar);
  EXPECT_TRUE(fresh.accept(text)) << text;
  if (ended) {
    EXPECT_TRUE(fresh.can_end()) << "ended incomplete: " << text;
  }
  return ended;
}

TEST(TokenMask, MaskedSamplerNeverLeavesTheGrammar) {
  const auto tok = load(spm_vocab());
  const TokenIndex index(tok);
  const std::string small_json = R"(
root ::= "{" ws "\"name\"" ws ":" ws string ws "," ws "\"n\"" ws ":" ws [0-9]{1,3} ws "}"
string ::= "\"" [^"\\\x7F\x00-\x1F]{0,12} "\""
ws ::= [ ]?
)";
  int ended = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) ended += sample_and_check(index, small_json, seed, 80);
  for (uint32_t seed = 1; seed <= 4; ++seed) ended += sample_and_check(index, kUtf8Grammar, seed, 40);
  EXPECT_GE(ended, 4);  // most samples reach the end
  sample_and_check(index, kJsonGrammar, 7, 40);
}

TEST(TokenMask, CacheHitsEqualFreshMasks) {
  const auto tok = load(spm_vocab());
  const TokenIndex index(tok);
  const auto grammar = Grammar::parse(kJsonGrammar);
  MaskCache cache(index, 4);
  Matcher a(grammar), b(grammar);
  ASSERT_TRUE(a.accept("{\"abc"));
  ASSERT_TRUE(b.accept("{\"xy"));
  const std::vector<uint8_t> first = cache.mask(a);
  const std::vector<uint8_t>& second = cache.mask(b);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(first, second);
  std::vector<uint8_t> fresh;
  index.allowed(b, fresh);
  EXPECT_EQ(fresh, second);
  // A different state misses, and eviction keeps at most max_entries.
  for (const char* more : {"\"", ":", " ", "1", "}"}) {
    ASSERT_TRUE(b.accept(more));
    index.allowed(b, fresh);
    EXPECT_EQ(cache.mask(b), fresh) << more;
  }
  EXPECT_EQ(cache.hits(), 1u);
}

}  // namespace
}  // namespace okapi::grammar
