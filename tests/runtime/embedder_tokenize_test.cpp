// Embedder's tokenization on a tiny bert with the bge WordPiece vocabulary: an input as
// llama-embedding tokenizes it, a rerank pair as llama-server's format_prompt_rerank builds it
// (without and with the model's tokenizer.chat_template.rerank), and a "query<TAB>document" line
// as llama-embedding's rank pooling joins it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/shared_dir.hpp"
#include "format/gguf.hpp"
#include "runtime/embedder.hpp"
#include "runtime/engine.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/tiny_models.hpp"
#include "synth/synth.hpp"

namespace okapi::runtime {
namespace {

namespace fs = std::filesystem;
using Tokens = std::vector<int32_t>;

fs::path bge_vocab() { return shared_dir() / "vocab" / "ggml-vocab-bert-bge.gguf"; }

class EmbedderTokenize : public ::testing::Test {
 protected:
  void SetUp() override {
    OKAPI_REQUIRE_DATA(bge_vocab());
    dir_ = test::make_temp_dir("embedder-tokenize");
    synth::SynthOptions options;
    options.layers = 1;
    options.vocab_from = bge_vocab();
    synth::write_synth(test::tiny_preset("bge-base-en-v1.5"), options, dir_ / "bert.gguf");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::unique_ptr<Engine> load(const fs::path& path) { return Engine::load(path, EngineOptions{}); }

  // The model with one more metadata key.
  fs::path with_key(const std::string& key, const std::string& value) {
    const std::vector<uint8_t> bytes =
        test::with_metadata(gguf::File::open(dir_ / "bert.gguf"), key, gguf::Value(std::string_view(value)));
    const fs::path path = dir_ / "bert-keyed.gguf";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  static Tokens encode(const Engine& engine, const std::string& text, bool add_special, bool parse_special) {
    tokenizer::EncodeOptions options;
    options.add_special = add_special;
    options.parse_special = parse_special;
    return engine.tokenizer().encode(text, options);
  }

  fs::path dir_;
};

Tokens concat(std::initializer_list<Tokens> parts) {
  Tokens out;
  for (const Tokens& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST_F(EmbedderTokenize, InputsGetClsAndSep) {
  const auto engine = load(dir_ / "bert.gguf");
  Embedder embedder(*engine, {});
  const Tokens tokens = embedder.tokenize("Hello, world!");
  const auto& vocab = engine->tokenizer().vocab();
  ASSERT_GE(tokens.size(), 3u);
  EXPECT_EQ(tokens.front(), 101);  // [CLS]
  EXPECT_EQ(tokens.back(), vocab.sep);
  EXPECT_EQ(tokens, concat({{101}, encode(*engine, "Hello, world!", false, false), {vocab.sep}}));
  EXPECT_TRUE(embedder.ends_with_sep_or_eos(tokens));
  EXPECT_FALSE(embedder.ends_with_sep_or_eos(Tokens{101, 7592}));
  // Special-token texts in an input are parsed, as llama-embedding does.
  EXPECT_EQ(embedder.tokenize("a [SEP] b"), concat({{101}, encode(*engine, "a", false, false), {vocab.sep},
                                                    encode(*engine, "b", false, false), {vocab.sep}}));
}

TEST_F(EmbedderTokenize, RerankPairAsLlamaServer) {
  const auto engine = load(dir_ / "bert.gguf");
  Embedder embedder(*engine, {});
  const int32_t sep = engine->tokenizer().vocab().sep;
  // bert: add_bos, no add_eos, add_sep: [CLS] query [SEP] document.
  EXPECT_EQ(embedder.tokenize_rerank("what is a panda?", "a bear [SEP]"),
            concat({{101}, encode(*engine, "what is a panda?", false, false), {sep},
                    encode(*engine, "a bear [SEP]", false, false)}));
}

TEST_F(EmbedderTokenize, RerankLineAsLlamaEmbedding) {
  const auto engine = load(dir_ / "bert.gguf");
  Embedder embedder(*engine, {});
  // The parts joined by the SEP text, then tokenized as any input: [CLS] q [SEP] d [SEP].
  EXPECT_EQ(embedder.tokenize_rank_line("what is a panda?\tit's a bear", "\t"),
            embedder.tokenize("what is a panda?[SEP]it's a bear"));
  EXPECT_EQ(embedder.tokenize_rank_line("no separator here", "\t"), embedder.tokenize("no separator here"));
  EXPECT_EQ(embedder.tokenize_rank_line("q<#>d", "<#>"), embedder.tokenize("q[SEP]d"));
}

TEST_F(EmbedderTokenize, RerankTemplateWhenTheModelHasOne) {
  const auto engine = load(with_key("tokenizer.chat_template.rerank", "[CLS]query: {query} document: {document}[SEP]"));
  Embedder embedder(*engine, {});
  // llama-server: the template filled in, tokenized without added specials, specials parsed.
  EXPECT_EQ(embedder.tokenize_rerank("pandas", "bears"),
            encode(*engine, "[CLS]query: pandas document: bears[SEP]", false, true));
  // llama-embedding: the same text tokenized as an input (specials added).
  EXPECT_EQ(embedder.tokenize_rank_line("pandas\tbears", "\t"),
            encode(*engine, "[CLS]query: pandas document: bears[SEP]", true, true));
}

}  // namespace
}  // namespace okapi::runtime
