// `okapi tokenize` as a user runs it: output formats, BOS handling, -f exact bytes, llama2.c
// tokenizer.bin, and failures (bad flags, missing model / input) with their exit codes.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

using test::run_cli;

std::string model(const char* name) { return (test::repo_dir() / "models" / name).string(); }

TEST(TokenizeCli, IdsIsOneLine) {
  const auto r = run_cli("tokenize -m " + model("stories260K.gguf") + " -p 'Once upon a time' --ids");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "[1, 403, 407, 261, 378]\n");
}

TEST(TokenizeCli, NoBos) {
  const auto r = run_cli("tokenize -m " + model("stories260K.gguf") + " -p 'Once upon a time' --ids --no-bos");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "[403, 407, 261, 378]\n");
}

TEST(TokenizeCli, DefaultListsPieces) {
  const auto r = run_cli("tokenize -m " + model("stories260K.gguf") + " -p 'Once upon'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "     1 -> '<s>'\n   403 -> ' Once'\n   407 -> ' upon'\n");
}

TEST(TokenizeCli, ParseSpecial) {
  const std::string base = "tokenize -m " + model("stories260K.gguf") + " -p '</s>' --ids --no-bos";
  EXPECT_EQ(run_cli(base + " --parse-special").output, "[2]\n");
  EXPECT_NE(run_cli(base).output, "[2]\n");
}

TEST(TokenizeCli, Llama2cTokenizerBin) {
  const auto r = run_cli("tokenize -m " + model("tok512.bin") + " -p 'Once upon a time' --ids");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "[1, 403, 407, 261, 378]\n");
}

TEST(TokenizeCli, FileExactBytes) {
  const auto dir = test::make_temp_dir("tokenize-cli");
  const auto path = dir / "prompt.txt";
  std::ofstream(path, std::ios::binary) << "Once upon a time\n";
  const auto r = run_cli("tokenize -m " + model("stories260K.gguf") + " -f " + path.string() + " --ids --no-bos");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // The trailing newline is tokenized too (the byte token <0x0A> = 13).
  EXPECT_EQ(r.output, "[403, 407, 261, 378, 13]\n");
  std::filesystem::remove_all(dir);
}

TEST(TokenizeCli, Json) {
  const auto r = run_cli("tokenize -m " + model("stories260K.gguf") + " -p 'Once' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["ids"], nlohmann::json::parse("[1, 403]"));
  EXPECT_EQ(j["pieces"][1], " Once");
}

TEST(TokenizeCli, Failures) {
  const std::string m = " -m " + model("stories260K.gguf");
  auto r = run_cli("tokenize -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/model.gguf"), std::string::npos) << r.output;
  r = run_cli("tokenize" + m);  // no text: a usage error
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("-p"), std::string::npos) << r.output;
  EXPECT_NE(run_cli("tokenize" + m + " -p a -f b").exit_code, 0);  // both
  EXPECT_NE(run_cli("tokenize" + m + " -p a --bogus").exit_code, 0);
  EXPECT_NE(run_cli("tokenize -p a").exit_code, 0);  // no model
  r = run_cli("tokenize" + m + " -f /nonexistent/input.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/input.txt"), std::string::npos) << r.output;
  // A file that is neither GGUF nor a llama2.c tokenizer.
  const auto dir = test::make_temp_dir("tokenize-cli-bad");
  std::ofstream(dir / "junk.bin", std::ios::binary) << "junk";
  r = run_cli("tokenize -m " + (dir / "junk.bin").string() + " -p hi");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace okapi
