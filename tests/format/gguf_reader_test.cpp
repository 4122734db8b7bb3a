// The reader against llama.cpp's own view of the shared models: every tensor's name, type, shape,
// offset, size and raw-byte sha256 as dumped by llama.cpp (golden/public/dequant/*.json).
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "format/gguf.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"

namespace okapi::gguf {
namespace {

namespace fs = std::filesystem;

TEST(GgufReader, ParsesEverySharedFile) {
  OKAPI_REQUIRE_SHARED();
  const auto files = test::shared_gguf_files();
  ASSERT_GE(files.size(), 40u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    File file = File::open(path);
    EXPECT_EQ(file.version(), 3u);
    EXPECT_FALSE(file.metadata().empty());
    EXPECT_EQ(file.file_size(), fs::file_size(path));
    for (const TensorInfo& t : file.tensors()) {
      EXPECT_LE(t.file_offset + t.nbytes, file.file_size()) << t.name;
      EXPECT_EQ(t.data, file.bytes().data() + t.file_offset);
    }
  }
}

void check_against_dequant_json(const fs::path& model, const fs::path& json_path) {
  SCOPED_TRACE(model.string());
  const auto golden = test::load_ordered_json(json_path);
  const File file = File::open(model);
  EXPECT_EQ(file.version(), golden.at("gguf_version").get<uint32_t>());
  EXPECT_EQ(file.alignment(), golden.at("alignment").get<uint64_t>());
  EXPECT_EQ(file.data_offset(), golden.at("data_offset").get<uint64_t>());
  const auto& tensors = golden.at("tensors");
  ASSERT_EQ(file.tensors().size(), tensors.size());
  ASSERT_EQ(file.tensors().size(), golden.at("n_tensors").get<size_t>());
  // ordered_json keeps the dump's order, which is llama.cpp's tensor order.
  size_t i = 0;
  for (const auto& [name, want] : tensors.items()) {
    const TensorInfo& t = file.tensors()[i++];
    SCOPED_TRACE(name);
    EXPECT_EQ(t.name, name);
    EXPECT_EQ(static_cast<uint32_t>(t.type), want.at("type_id").get<uint32_t>());
    EXPECT_EQ(t.shape, want.at("shape").get<std::vector<int64_t>>());
    EXPECT_EQ(t.file_offset, want.at("file_offset").get<uint64_t>());
    EXPECT_EQ(t.nbytes, want.at("raw_nbytes").get<uint64_t>());
    EXPECT_EQ(t.n_elements(), want.at("n_elements").get<int64_t>());
    EXPECT_EQ(okapi::sha256_hex(t.bytes()), want.at("raw_sha256").get<std::string>());
  }
}

TEST(GgufReader, TensorTablesMatchLlamaCpp) {
  OKAPI_REQUIRE_SHARED();
  const fs::path shared = okapi::shared_dir();
  size_t checked = 0;
  for (const char* root : {"golden/public", "golden/ik/public"}) {
    const fs::path dequant = shared / root / "dequant";
    for (const auto& entry : fs::directory_iterator(dequant)) {
      if (entry.path().extension() != ".json") continue;
      const fs::path model = shared / root / "models" / (entry.path().stem().string() + ".gguf");
      if (!fs::exists(model)) continue;  // goldens of a source model that is not shipped
      check_against_dequant_json(model, entry.path());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 27u + 8u);
}

TEST(GgufReader, ReadsTypedMetadata) {
  OKAPI_REQUIRE_SHARED();
  const File file = File::open(okapi::shared_dir() / "models" / "stories260K.gguf");
  EXPECT_EQ(file.architecture(), "llama");
  EXPECT_EQ(file.at("llama.context_length").as_int(), 2048);
  EXPECT_EQ(file.at("llama.context_length").type(), ValueType::U32);
  const auto tokens = file.at("tokenizer.ggml.tokens").as_string_array();
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(file.at("tokenizer.ggml.scores").as_float_array().size(), 512u);
  EXPECT_EQ(file.at("tokenizer.ggml.token_type").as_int_array().size(), 512u);
  EXPECT_EQ(file.find("general.alignment"), nullptr);
  EXPECT_EQ(file.alignment(), kDefaultAlignment);
  EXPECT_THROW((void)file.at("no.such.key"), Error);
  EXPECT_THROW((void)file.tensor("no.such.tensor"), Error);
  const TensorInfo& embd = file.tensor("token_embd.weight");
  EXPECT_EQ(embd.type, DType::F32);
  EXPECT_EQ(embd.n_rows(), 512);
  const std::string shown = file.at("tokenizer.ggml.tokens").to_display(2);
  EXPECT_EQ(shown, "[\"<unk>\", \"<s>\", ... (512 string items)]");
}

// Tensor views stay valid as long as any copy of the File lives (the mapping is shared).
TEST(GgufReader, CopiesKeepTheMappingAlive) {
  OKAPI_REQUIRE_SHARED();
  const fs::path path = okapi::shared_dir() / "models" / "stories260K.gguf";
  std::optional<File> copy;
  std::string want;
  {
    const File file = File::open(path);
    want = okapi::sha256_hex(file.tensors().back().bytes());
    copy = file;
  }
  EXPECT_EQ(okapi::sha256_hex(copy->tensors().back().bytes()), want);
}

}  // namespace
}  // namespace okapi::gguf
