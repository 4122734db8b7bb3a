// The tokenizer's vocabulary against the token embedding: every token needs a row, so a tokenizer
// with more tokens than the embedding (or the output matrix) has rows is refused at load, naming
// both numbers, before any tokenizer table is built from it (a huge one is refused fast and in
// little memory); an embedding padded past the tokenizer (as Qwen2's is) still loads and runs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "model/model.hpp"
#include "support/measured_run.hpp"
#include "support/paths.hpp"
#include "support/tiny_models.hpp"

namespace okapi::test {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The file's tokens followed by `extra` made-up ones.
gguf::Value tokens_plus(const gguf::File& file, size_t extra) {
  gguf::Array tokens = file.at("tokenizer.ggml.tokens").as_array();
  tokens.items.reserve(tokens.items.size() + extra);
  for (size_t i = 0; i < extra; ++i) tokens.items.emplace_back(std::string("<extra_") + std::to_string(i) + ">");
  return gguf::Value(std::move(tokens));
}

int64_t embedding_rows(const gguf::File& file) { return file.find_tensor("token_embd.weight")->shape[1]; }

TEST(VocabSize, ATokenizerLargerThanTheEmbeddingIsRefusedNamingBoth) {
  for (const std::string& arch : tiny_model_archs()) {
    SCOPED_TRACE(arch);
    const std::vector<uint8_t> valid = tiny_model(arch);
    const gguf::File file = gguf::File::parse(valid, arch);
    const int64_t rows = embedding_rows(file);
    ASSERT_EQ(static_cast<int64_t>(file.at("tokenizer.ggml.tokens").as_array().items.size()), rows);
    const std::string error = load_error(with_metadata(file, "tokenizer.ggml.tokens", tokens_plus(file, 1)));
    EXPECT_TRUE(contains(error, "'tokenizer.ggml.tokens' has " + std::to_string(rows + 1) +
                                    " tokens, but 'token_embd.weight' has only " + std::to_string(rows) + " rows"))
        << error;
  }
}

// Qwen-style padding: the embedding (and output) rows outnumber the tokens. Ids past the tokenizer
// are never produced from text; the model loads and generates.
TEST(VocabSize, AnEmbeddingPaddedPastTheTokenizerRuns) {
  const fs::path dir = make_temp_dir("vocab-padded");
  for (const std::string& arch : {std::string("llama"), std::string("qwen2")}) {
    SCOPED_TRACE(arch);
    const std::vector<uint8_t> valid = tiny_model(arch);
    const gguf::File file = gguf::File::parse(valid, arch);
    constexpr int64_t kPad = 8;
    gguf::Writer w;
    w.copy_metadata(file);
    for (const auto& t : file.tensors()) {
      if (t.name != "token_embd.weight" && t.name != "output.weight") {
        w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
        continue;
      }
      std::vector<uint8_t> bytes(t.bytes().begin(), t.bytes().end());
      bytes.resize(bytes.size() + static_cast<size_t>(t.shape[0] * kPad) * sizeof(float), 0);
      w.add_tensor(t.name, t.type, {t.shape[0], t.shape[1] + kPad}, std::move(bytes));
    }
    const std::vector<uint8_t> padded = w.to_bytes();
    EXPECT_EQ(load_error(padded), "");
    const fs::path path = dir / (arch + ".gguf");
    write_file(path, padded);
    const MeasuredRun r = run_okapi_measured({"run", "-m", path.string(), "-n", "8", "-p", "hi", "--temp", "0"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  fs::remove_all(dir);
}

// A million tokens over a 260-row embedding: refused at load, before the tokenizer's tables (its
// strings copied, its text-to-id index) exist. Reading the file's metadata is all the work done.
TEST(VocabSize, AHugeVocabularyIsRefusedFastInLittleMemory) {
  const fs::path dir = make_temp_dir("vocab-huge");
  const std::vector<uint8_t> valid = tiny_model("llama");
  const gguf::File file = gguf::File::parse(valid, "llama");
  constexpr size_t kTokens = 1000000;
  const fs::path path = dir / "huge-vocab.gguf";
  write_file(path, with_metadata(file, "tokenizer.ggml.tokens", tokens_plus(file, kTokens)));
  const auto start = std::chrono::steady_clock::now();
  const MeasuredRun r = run_okapi_measured({"run", "-m", path.string(), "-n", "1", "-p", "hi"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "okapi: error: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "'tokenizer.ggml.tokens' has " + std::to_string(kTokens + 260) +
                                     " tokens, but 'token_embd.weight' has only 260 rows"))
      << r.output;
  // Generous for sanitizer builds; a release build takes a fraction of a second.
  EXPECT_LT(seconds, 10.0);
  EXPECT_LT(r.work_rss_kb, 400 * 1024);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::test
