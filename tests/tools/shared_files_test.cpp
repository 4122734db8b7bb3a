// Every model file the team has (../shared/models, golden models, vocabularies) goes through the
// verbs that apply to it: inspect (table and JSON), convert for llama2.c checkpoints, quantize
// for GGUF models, and the outputs load back.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/gguf.hpp"
#include "support/cli.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

using test::shared_files;

TEST(SharedFiles, InspectEveryFile) {
  OKAPI_REQUIRE_SHARED();
  auto files = test::shared_gguf_files();
  const auto bins = shared_files({"models"}, ".bin");
  files.insert(files.end(), bins.begin(), bins.end());
  ASSERT_GE(files.size(), 40u);
  for (const auto& f : files) {
    const auto table = run_cli("inspect '" + f.string() + "'");
    EXPECT_EQ(table.exit_code, 0) << f << "\n" << table.output.substr(0, 2000);
    const auto json = run_cli("inspect --json '" + f.string() + "'");
    ASSERT_EQ(json.exit_code, 0) << f;
    EXPECT_TRUE(nlohmann::json::accept(json.output)) << f;
  }
}

TEST(SharedFiles, ConvertEveryCheckpoint) {
  OKAPI_REQUIRE_SHARED();
  const auto dir = test::make_temp_dir("convert-all");
  const auto tokenizer = shared_dir() / "models" / "tok512.bin";
  int converted = 0;
  for (const auto& f : shared_files({"models"}, ".bin")) {
    if (f.filename() == "tok512.bin") continue;
    const auto out = dir / (f.stem().string() + ".gguf");
    const auto r = run_cli("convert '" + f.string() + "' --tokenizer '" + tokenizer.string() + "' -o '" +
                           out.string() + "'");
    ASSERT_EQ(r.exit_code, 0) << f << "\n" << r.output;
    const auto file = gguf::File::open(out);
    EXPECT_FALSE(file.tensors().empty()) << f;
    EXPECT_EQ(file.at("tokenizer.ggml.tokens").as_array().items.size(), 512u) << f;
    ++converted;
  }
  EXPECT_EQ(converted, 3);
  fs::remove_all(dir);
}

TEST(SharedFiles, QuantizeEveryModel) {
  OKAPI_REQUIRE_SHARED();
  const auto dir = test::make_temp_dir("quantize-all");
  int quantized = 0;
  for (const auto& f : shared_files({"models", "golden/public/models", "golden/ik/public/models"}, ".gguf")) {
    const auto out = dir / "out.gguf";
    // Q8_0 applies to every model (rows of 32k); 256-wide rows also take a k-quant mix.
    for (const std::string type : {"Q8_0", "Q4_K_M"}) {
      // Most shared files are already quantized: llama-quantize needs --allow-requantize for them too.
      const auto r = run_cli("quantize -t 2 --allow-requantize '" + f.string() + "' '" + out.string() + "' " + type);
      ASSERT_EQ(r.exit_code, 0) << f << " " << type << "\n" << r.output;
      const auto in_file = gguf::File::open(f);
      const auto out_file = gguf::File::open(out);
      EXPECT_EQ(out_file.tensors().size(), in_file.tensors().size()) << f;
      ++quantized;
    }
  }
  EXPECT_GE(quantized, 2 * 30);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi
