// Byte-level BPE sessions against llama.cpp's test vectors (../shared/vocab), plus the merge logic
// on a hand-made vocabulary. The session sees raw text only (no BOS, no special-token parsing),
// which is how the vectors were made; the vocabulary is loaded here directly from GGUF metadata so
// that these tests depend on nothing but the session.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "support/paths.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace okapi::tokenizer {
namespace {

using test::read_file;

Vocab load_bpe_vocab(const std::filesystem::path& path) {
  const auto file = gguf::File::open(path);
  Vocab vocab;
  vocab.kind = ModelKind::BPE;
  vocab.tokens = file.at("tokenizer.ggml.tokens").as_string_array();
  if (const auto* pre = file.find("tokenizer.ggml.pre")) vocab.pre = pre->as_string();
  if (vocab.pre.empty()) vocab.pre = "default";
  for (const auto& merge : file.at("tokenizer.ggml.merges").as_string_array()) {
    const size_t space = merge.find(' ', 1);  // as llama.cpp: the first space after the first byte
    vocab.merges.emplace_back(merge.substr(0, space), space == std::string::npos ? "" : merge.substr(space + 1));
  }
  for (const int64_t type : file.at("tokenizer.ggml.token_type").as_int_array()) {
    vocab.types.push_back(static_cast<TokenType>(type));
  }
  for (size_t i = 0; i < vocab.tokens.size(); ++i) vocab.token_to_id.emplace(vocab.tokens[i], static_cast<TokenId>(i));
  return vocab;
}

// llama.cpp splits user-defined tokens out of the text even when special tokens are not parsed
// (tokenizer_st_partition, longest token texts first). That is the Tokenizer's job; this minimal
// version lets the session be checked on the vectors that contain such texts (mpt's runs of
// spaces, deepseek-coder's single-character added tokens).
void encode_with_user_defined(const Vocab& vocab, const Session& session, const std::string& text,
                              std::vector<TokenId>& out) {
  std::vector<TokenId> user_defined;
  for (size_t i = 0; i < vocab.types.size(); ++i) {
    if (vocab.types[i] == TokenType::UserDefined) user_defined.push_back(static_cast<TokenId>(i));
  }
  std::stable_sort(user_defined.begin(), user_defined.end(),
                   [&](TokenId a, TokenId b) { return vocab.tokens[a].size() > vocab.tokens[b].size(); });
  struct Fragment {
    std::string text;
    TokenId id;  // kNoToken for raw text
  };
  std::vector<Fragment> fragments = {{text, kNoToken}};
  for (const TokenId id : user_defined) {
    const std::string& special = vocab.tokens[id];
    std::vector<Fragment> next;
    for (auto& fragment : fragments) {
      if (fragment.id != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      size_t start = 0;
      for (size_t hit; (hit = fragment.text.find(special, start)) != std::string::npos; start = hit + special.size()) {
        if (hit > start) next.push_back({fragment.text.substr(start, hit - start), kNoToken});
        next.push_back({special, id});
      }
      if (start < fragment.text.size()) next.push_back({fragment.text.substr(start), kNoToken});
    }
    fragments = std::move(next);
  }
  for (const auto& fragment : fragments) {
    if (fragment.id != kNoToken) {
      out.push_back(fragment.id);
    } else {
      session.encode_fragment(fragment.text, out);
    }
  }
}

struct Case {
  std::string text;
  std::vector<TokenId> ids;
};

// test-tokenizer-0 layout: texts separated by "\n__ggml_vocab_test__\n", one id line per text.
std::vector<Case> load_cases(const std::filesystem::path& vocab_path) {  // vocab_path + ".inp"/".out"
  const std::string inp = read_file(vocab_path.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t start = 0; start < inp.size();) {
    size_t end = inp.find(sep, start);
    if (end == std::string::npos) end = inp.size();
    cases.push_back({inp.substr(start, end - start), {}});
    start = end + sep.size();
  }
  std::istringstream out(read_file(vocab_path.string() + ".out"));
  std::string line;
  for (auto& c : cases) {
    if (!std::getline(out, line)) break;
    std::istringstream ids(line);
    for (TokenId id = 0; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

struct VectorSet {
  std::string family;
  std::string folder;  // under ../shared, where the .inp/.out pair lives
};

void PrintTo(const VectorSet& set, std::ostream* os) { *os << set.folder << "/" << set.family; }

class BpeVectors : public ::testing::TestWithParam<VectorSet> {};

TEST_P(BpeVectors, MatchLlamaCpp) {
  OKAPI_REQUIRE_SHARED();
  const std::string file_name = "ggml-vocab-" + GetParam().family + ".gguf";
  const Vocab vocab = load_bpe_vocab(okapi::shared_dir() / "vocab" / file_name);
  const auto session = make_bpe_session(vocab);
  const auto cases = load_cases(okapi::shared_dir() / GetParam().folder / file_name);
  ASSERT_GE(cases.size(), 4u);
  size_t passed = 0;
  for (const auto& c : cases) {
    std::vector<TokenId> ids;
    encode_with_user_defined(vocab, *session, c.text, ids);
    if (ids == c.ids) {
      ++passed;
    } else {
      ADD_FAILURE() << GetParam().family << ": text '" << c.text << "' gave " << ::testing::PrintToString(ids)
                    << " expected " << ::testing::PrintToString(c.ids);
    }
  }
  EXPECT_EQ(passed, cases.size());
  std::cout << GetParam().folder << "/" << GetParam().family << ": " << passed << "/" << cases.size() << " vectors\n";
}

INSTANTIATE_TEST_SUITE_P(
    Vocabularies, BpeVectors,
    ::testing::Values(VectorSet{"gpt-2", "vocab"}, VectorSet{"falcon", "vocab"}, VectorSet{"mpt", "vocab"},
                      VectorSet{"starcoder", "vocab"}, VectorSet{"refact", "vocab"}, VectorSet{"deepseek-llm", "vocab"},
                      VectorSet{"deepseek-coder", "vocab"}, VectorSet{"gpt-2", "golden/public/tokenizer"},
                      VectorSet{"gpt-neox", "golden/public/tokenizer"}, VectorSet{"falcon", "golden/public/tokenizer"},
                      VectorSet{"mpt", "golden/public/tokenizer"}, VectorSet{"starcoder", "golden/public/tokenizer"},
                      VectorSet{"refact", "golden/public/tokenizer"},
                      VectorSet{"deepseek-llm", "golden/public/tokenizer"},
                      VectorSet{"deepseek-coder", "golden/public/tokenizer"}));

// Random text (valid UTF-8 from several scripts, whitespace, digits): ids are in range and the
// byte-level pieces concatenate back to the input.
std::string random_text(std::mt19937& rng) {
  static const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x24F}, {0x370, 0x3FF}, {0x400, 0x4FF}, {0x600, 0x6FF},
      {0x900, 0x97F}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F}, {0x2000, 0x206F}};
  std::string text;
  const size_t length = rng() % 48;
  for (size_t i = 0; i < length; ++i) {
    const auto& range = ranges[rng() % ranges.size()];
    append_utf8(text, range.first + static_cast<uint32_t>(rng() % (range.second - range.first + 1)));
  }
  return text;
}

class BpeRandomText : public ::testing::TestWithParam<std::string> {};

TEST_P(BpeRandomText, IdsInRangeAndRoundTrip) {
  OKAPI_REQUIRE_SHARED();
  const Vocab vocab = load_bpe_vocab(okapi::shared_dir() / "vocab" / ("ggml-vocab-" + GetParam() + ".gguf"));
  const auto session = make_bpe_session(vocab);
  std::mt19937 rng(42);
  for (int round = 0; round < 300; ++round) {
    const std::string text = random_text(rng);
    std::vector<TokenId> ids;
    session->encode_fragment(text, ids);
    std::string decoded;
    for (const TokenId id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(static_cast<size_t>(id), vocab.size());
      decoded += bpe_byte_decode(vocab.tokens[static_cast<size_t>(id)]);
    }
    // A byte without a single-byte token is dropped as in llama.cpp (falcon has none for \v).
    const bool every_byte_is_a_token = std::all_of(text.begin(), text.end(), [&](char byte) {
      return vocab.token_to_id.count(bpe_byte_encode(std::string(1, byte))) != 0;
    });
    if (every_byte_is_a_token) {
      EXPECT_EQ(decoded, text) << GetParam();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, BpeRandomText,
                         ::testing::Values("gpt-2", "gpt-neox", "falcon", "mpt", "starcoder", "refact", "deepseek-llm",
                                           "deepseek-coder"));

// A tiny byte-level vocabulary: single symbols plus merges, to pin the merge order.
Vocab tiny_vocab(std::vector<std::string> tokens, std::vector<std::pair<std::string, std::string>> merges,
                 std::string pre = "gpt-2") {
  Vocab vocab;
  vocab.kind = ModelKind::BPE;
  vocab.pre = std::move(pre);
  vocab.tokens = std::move(tokens);
  vocab.merges = std::move(merges);
  for (size_t i = 0; i < vocab.tokens.size(); ++i) vocab.token_to_id.emplace(vocab.tokens[i], static_cast<TokenId>(i));
  return vocab;
}

std::vector<TokenId> encode(const Vocab& vocab, std::string_view text) {
  std::vector<TokenId> ids;
  make_bpe_session(vocab)->encode_fragment(text, ids);
  return ids;
}

TEST(Bpe, LowestRankMergesFirst) {
  // "abc": (b,c) has rank 0 so it wins over (a,b); then (a,bc) merges.
  const Vocab vocab = tiny_vocab({"a", "b", "c", "ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}, {"a", "bc"}});
  EXPECT_EQ(encode(vocab, "abc"), (std::vector<TokenId>{5}));
  EXPECT_EQ(encode(vocab, "ab"), (std::vector<TokenId>{3}));
  EXPECT_EQ(encode(vocab, "cab"), (std::vector<TokenId>{2, 3}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  // "aaa" with only (a,a): the left pair merges, leaving "aa" "a".
  const Vocab vocab = tiny_vocab({"a", "aa"}, {{"a", "a"}});
  EXPECT_EQ(encode(vocab, "aaa"), (std::vector<TokenId>{1, 0}));
  EXPECT_EQ(encode(vocab, "aaaa"), (std::vector<TokenId>{1, 1}));
}

TEST(Bpe, SpacesAreByteMapped) {
  const Vocab vocab = tiny_vocab({"a", "\xC4\xA0", "\xC4\xA0" "a"}, {{"\xC4\xA0", "a"}});  // "Ġ", "Ġa"
  EXPECT_EQ(encode(vocab, "a a"), (std::vector<TokenId>{0, 2}));
}

TEST(Bpe, UnknownPiecesFallBackToSingleByteTokensOrVanish) {
  const Vocab vocab = tiny_vocab({"a", "b"}, {});
  EXPECT_EQ(encode(vocab, "axb"), (std::vector<TokenId>{0, 1}));  // "x" is not a token: dropped
}

TEST(Bpe, IgnoreMergesTakesWholeWordTokens) {
  // llama3 family: a word that is a token is used as is even though no merge path reaches it.
  const Vocab llama3 = tiny_vocab({"a", "b", "c", "abc"}, {}, "llama-bpe");
  EXPECT_EQ(encode(llama3, "abc"), (std::vector<TokenId>{3}));
  const Vocab gpt2 = tiny_vocab({"a", "b", "c", "abc"}, {}, "gpt-2");
  EXPECT_EQ(encode(gpt2, "abc"), (std::vector<TokenId>{0, 1, 2}));
}

TEST(Bpe, InvalidUtf8BecomesReplacementCharacter) {
  // llama.cpp decodes each invalid byte as U+FFFD (bytes EF BF BD) before byte-level mapping.
  const std::string fffd = bpe_byte_encode("\xEF\xBF\xBD");
  const Vocab vocab = tiny_vocab({"a", fffd}, {}, "llama-bpe");  // whole-word lookup, no merges needed
  EXPECT_EQ(encode(vocab, "a\xFF"), (std::vector<TokenId>{0, 1}));
}

TEST(Bpe, ByteMappingRoundTrips) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  const std::string mapped = bpe_byte_encode(all_bytes);
  EXPECT_EQ(bpe_byte_encode(" "), "\xC4\xA0");   // space -> U+0120 "Ġ"
  EXPECT_EQ(bpe_byte_encode("\n"), "\xC4\x8A");  // newline -> U+010A "Ċ"
  EXPECT_EQ(bpe_byte_encode("a"), "a");
  EXPECT_EQ(bpe_byte_decode(mapped), all_bytes);
  // A codepoint outside the mapping is marked as llama.cpp's llama_decode_text does.
  EXPECT_EQ(bpe_byte_decode("\xE4\xB8\xAD"), "[UNK_BYTE_0xe4b8ad\xE4\xB8\xAD]");
}

// Large inputs, including one pre-token of 256 KiB, encode completely and decode back (their
// speed, and that the merge loop is not quadratic: bench/tokenizer_scaling_bench.cpp).
TEST(Bpe, LargeInputsTokenize) {
  OKAPI_REQUIRE_SHARED();
  const Vocab vocab = load_bpe_vocab(okapi::shared_dir() / "vocab" / "ggml-vocab-gpt-2.gguf");
  const auto session = make_bpe_session(vocab);
  std::string text;
  while (text.size() < (1u << 20)) text += "The Tower of London, founded in 1066, is a castle. \xC3\x9C\xE6\x9D\xB1 \n\n  ";
  std::vector<TokenId> ids;
  session->encode_fragment(text, ids);
  EXPECT_GT(ids.size(), text.size() / 8);
  const std::string one_word(1u << 18, 'a');
  std::vector<TokenId> word_ids;
  session->encode_fragment(one_word, word_ids);
  ASSERT_FALSE(word_ids.empty());
  EXPECT_LT(word_ids.size(), one_word.size() / 2) << "merges happened";
  std::string joined;
  for (const TokenId id : word_ids) joined += vocab.tokens[static_cast<size_t>(id)];
  EXPECT_EQ(joined, one_word);
}

TEST(Bpe, UnknownPreTokenizerIsAnError) {
  const Vocab vocab = tiny_vocab({"a"}, {}, "no-such-family");
  EXPECT_THROW(make_bpe_session(vocab), okapi::Error);
}

}  // namespace
}  // namespace okapi::tokenizer
