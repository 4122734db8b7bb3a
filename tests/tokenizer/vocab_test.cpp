// Vocabulary loading (llama.cpp's defaults and overrides, malformed metadata) and the special-token
// rules of llama.cpp's tokenizer_st_partition, on small GGUF vocabularies built here.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::tokenizer {
namespace {

constexpr EncodeOptions kPlain{.add_special = false, .parse_special = false};
constexpr EncodeOptions kSpecial{.add_special = false, .parse_special = true};

const char* const kSp = "\xE2\x96\x81";  // U+2581

// A small SPM vocabulary: <unk> <s> </s>, 256 byte tokens (ids 3..258), then a few pieces.
gguf::Writer spm_writer(const std::string& general_name = "tiny") {
  std::vector<gguf::Value> tokens, scores, types;
  auto add = [&](std::string text, float score, TokenType type) {
    tokens.emplace_back(std::move(text));
    scores.emplace_back(score);
    types.emplace_back(static_cast<int32_t>(type));
  };
  add("<unk>", 0, TokenType::Unknown);
  add("<s>", 0, TokenType::Control);
  add("</s>", 0, TokenType::Control);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0, TokenType::Byte);
  add(kSp, -1, TokenType::Normal);                        // 259
  add("a", -2, TokenType::Normal);                        // 260
  add("b", -2, TokenType::Normal);                        // 261
  add(std::string(kSp) + "a", -0.5f, TokenType::Normal);  // 262
  add("ab", -0.25f, TokenType::Normal);                   // 263
  add("<|user|>", 0, TokenType::UserDefined);             // 264
  gguf::Writer w;
  w.set("general.name", general_name);
  w.set("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens", gguf::Array{gguf::ValueType::STRING, tokens});
  w.set("tokenizer.ggml.scores", gguf::Array{gguf::ValueType::F32, scores});
  w.set("tokenizer.ggml.token_type", gguf::Array{gguf::ValueType::I32, types});
  return w;
}

Vocab load(const gguf::Writer& w) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  return Vocab::from_gguf(gguf::File::parse(bytes));
}

void expect_error(const gguf::Writer& w, const std::string& needle) {
  try {
    load(w);
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Vocab, SpmDefaultsAndOverrides) {
  Vocab v = load(spm_writer());
  EXPECT_EQ(v.kind, ModelKind::SPM);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.linefeed, 3 + '\n');

  auto w = spm_writer();
  w.set("tokenizer.ggml.add_bos_token", false);
  w.set("tokenizer.ggml.add_eos_token", true);
  w.set("tokenizer.ggml.add_space_prefix", false);
  w.set("tokenizer.ggml.eos_token_id", uint32_t{1});
  w.set("tokenizer.ggml.bos_token_id", uint32_t{99999});  // out of range: llama.cpp keeps the default
  v = load(w);
  EXPECT_FALSE(v.add_bos);
  EXPECT_TRUE(v.add_eos);
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_EQ(v.eos, 1);
  EXPECT_EQ(v.bos, 1);
  const Tokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("ab"), (std::vector<TokenId>{263, 1}));  // no space prefix, EOS (= id 1) appended
}

TEST(Vocab, Gpt2Defaults) {
  gguf::Writer w;
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "gpt-2");
  w.set("tokenizer.ggml.tokens", gguf::Array{gguf::ValueType::STRING, {"a", "b", "ab"}});
  w.set("tokenizer.ggml.merges", gguf::Array{gguf::ValueType::STRING, {"a b"}});
  Vocab v = load(w);
  EXPECT_EQ(v.kind, ModelKind::BPE);
  EXPECT_FALSE(v.add_bos);  // gpt2 adds no BOS unless tokenizer.ggml.add_bos_token says so
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_TRUE(v.clean_spaces);
  ASSERT_EQ(v.merges.size(), 1u);
  EXPECT_EQ(v.merges[0], (std::pair<std::string, std::string>{"a", "b"}));
  EXPECT_EQ(v.bos, kNoToken);  // the default 11 is outside this vocabulary
  w.set("tokenizer.ggml.add_bos_token", true);
  EXPECT_TRUE(load(w).add_bos);
  w.set("tokenizer.ggml.pre", "llama-bpe");
  w.remove("tokenizer.ggml.add_bos_token");
  EXPECT_TRUE(load(w).add_bos);  // llama 3 adds BOS by default
}

TEST(Vocab, MalformedMetadataIsRejected) {
  auto w = spm_writer();
  w.remove("tokenizer.ggml.model");
  expect_error(w, "tokenizer.ggml.model");
  w = spm_writer();
  w.set("tokenizer.ggml.model", "klingon");
  expect_error(w, "klingon");
  w = spm_writer();
  w.set("tokenizer.ggml.scores", gguf::Array{gguf::ValueType::F32, {1.0f}});
  expect_error(w, "tokenizer.ggml.scores");
  w = spm_writer();
  w.set("tokenizer.ggml.token_type", gguf::Array{gguf::ValueType::I32, {int32_t{1}}});
  expect_error(w, "tokenizer.ggml.token_type");
  w = spm_writer();
  w.set("tokenizer.ggml.tokens", gguf::Array{gguf::ValueType::STRING, {}});
  w.remove("tokenizer.ggml.scores");
  w.remove("tokenizer.ggml.token_type");
  expect_error(w, "tokenizer.ggml.tokens");
  w = spm_writer();
  w.set("tokenizer.ggml.tokens", int32_t{3});
  expect_error(w, "");  // wrong value type: any okapi::Error
  gguf::Writer bpe;
  bpe.set("tokenizer.ggml.model", "gpt2");
  bpe.set("tokenizer.ggml.tokens", gguf::Array{gguf::ValueType::STRING, {"a"}});
  expect_error(bpe, "tokenizer.ggml.merges");
  bpe.set("tokenizer.ggml.merges", gguf::Array{gguf::ValueType::STRING, {"ab"}});
  expect_error(bpe, "tokenizer.ggml.merges[0]");
}

TEST(Vocab, Llama2cRejectsNonTokenizer) {
  const auto dir = okapi::test::make_temp_dir("vocab-llama2c");
  std::ofstream(dir / "bad.bin", std::ios::binary) << "xy";
  EXPECT_THROW(Vocab::from_llama2c(dir / "bad.bin"), Error);
  EXPECT_THROW(Vocab::from_llama2c(dir / "missing.bin"), Error);
  std::filesystem::remove_all(dir);
}

TEST(SpecialTokens, UserDefinedAlwaysControlOnlyWhenParsing) {
  const Tokenizer tok(load(spm_writer()));
  // User-defined tokens are split out even without parse_special (Hugging Face does the same).
  EXPECT_EQ(tok.encode("a<|user|>b", kPlain), (std::vector<TokenId>{262, 264, 259, 261}));
  // ... so plain text holding one does not round-trip: the fragment after it got its own space
  // prefix, and detokenize drops only the first piece's (tokenizer_fuzz's phi-3 "</s>" case).
  EXPECT_EQ(tok.decode(tok.encode("a<|user|>b", kPlain)), "a<|user|> b");
  // Control tokens only with parse_special; each text fragment after a special token gets the
  // space prefix.
  EXPECT_EQ(tok.encode("a<s>b", kSpecial), (std::vector<TokenId>{262, 1, 259, 261}));
  const auto plain = tok.encode("a<s>b", kPlain);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok.encode("<s><s>", kSpecial), (std::vector<TokenId>{1, 1}));
  EXPECT_EQ(tok.decode(tok.encode("a<s>b", kSpecial), true), "a<s> b");
}

TEST(SpecialTokens, Phi3NameStripsSpaceAfterSpecialTokens) {
  // llama.cpp marks control / user-defined tokens of models named phi-3 / phi3 RSTRIP (except
  // <unk>, <s>, <|endoftext|>), so the whitespace after them is dropped.
  const Tokenizer phi(load(spm_writer("Phi3")));
  EXPECT_EQ(phi.encode("<|user|>  a", kPlain), (std::vector<TokenId>{264, 262}));
  EXPECT_EQ(phi.encode("</s>  a", kSpecial), (std::vector<TokenId>{2, 262}));
  EXPECT_EQ(phi.encode("<s> a", kSpecial), (std::vector<TokenId>{1, 259, 262}));  // <s> keeps it
  const Tokenizer plain(load(spm_writer("tiny")));
  EXPECT_EQ(plain.encode("</s> a", kSpecial), (std::vector<TokenId>{2, 259, 262}));
}

TEST(SpecialTokens, TokenizerSurvivesMove) {
  Tokenizer a(load(spm_writer()));
  Tokenizer b(std::move(a));
  EXPECT_EQ(b.encode("ab", kPlain), (std::vector<TokenId>{259, 263}));
}

}  // namespace
}  // namespace okapi::tokenizer
