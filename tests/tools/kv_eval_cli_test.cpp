// okapi kv-eval as a user runs it: one JSON object per type with the documented fields, a clear
// row for a type the model's head width cannot take, clear errors for bad type lists, and on a
// 64-wide-head model the quality order of the formats (q8_0 far closer to f32 than q4_0).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

using test::run_command;

std::string cli() { return test::cli_path().string(); }

// The JSON lines of `okapi ARGS` (stderr dropped).
std::vector<nlohmann::json> json_lines(const std::string& args, int* exit_code) {
  const auto r = run_command("( " + cli() + " " + args + " 2>/dev/null )");
  *exit_code = r.exit_code;
  std::vector<nlohmann::json> out;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

TEST(KvEvalCli, JsonRowsAndAnErrorRowForANarrowHead) {
  const std::string model = (test::repo_dir() / "models/stories260K.gguf").string();
  const std::string text = (test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt").string();
  int code = -1;
  const auto rows = json_lines("kv-eval -m " + model + " -f " + text + " -c 64 --types f16,bf16,q8_0 --no-speed --json -t 1",
                               &code);
  ASSERT_EQ(code, 0);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["type"], "f16");
  for (const char* field : {"bits_per_value", "kld_mean", "kld_p99", "top1", "ppl", "ppl_delta_rel", "tg_512", "tg_8192"}) {
    EXPECT_TRUE(rows[0].contains(field)) << field;
  }
  EXPECT_EQ(rows[0]["bits_per_value"], 16.0);
  EXPECT_LT(rows[0]["kld_mean"].get<double>(), 1e-4);
  EXPECT_GE(rows[0]["top1"].get<double>(), 0.95);
  EXPECT_TRUE(rows[0]["tg_512"].is_null());  // --no-speed
  // stories260K's heads are 8 wide: q8_0 (blocks of 32) cannot store them.
  EXPECT_NE(rows[2]["error"].get<std::string>().find("8 wide"), std::string::npos) << rows[2].dump();
}

TEST(KvEvalCli, BadTypeListsAreClearErrors) {
  const std::string model = (test::repo_dir() / "models/stories260K.gguf").string();
  for (const std::string types : {"q9_0", "q8_0+spin", "f16,,q8_0"}) {
    const auto r = test::run_cli("kv-eval -m " + model + " -f /dev/null --types '" + types + "'");
    EXPECT_NE(r.exit_code, 0) << types;
    EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << r.output;
  }
}

// Nothing reaches stdout (not even the table's header) when the model or the text is bad.
TEST(KvEvalCli, ABadModelPrintsNothingOnStdout) {
  const std::string text = (test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt").string();
  const auto r = test::run_command("( " + cli() + " kv-eval -m /nonexistent.gguf -f " + text + " 2>/dev/null )");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "");
}

TEST(KvEvalCli, FormatsKeepTheirQualityOrderOnA64WideModel) {
  OKAPI_REQUIRE_SHARED();
  const std::string model = (shared_dir() / "models/zoo/okapi-ts5M-hd64.gguf").string();
  const std::string text = (shared_dir() / "text/tinystories-valid-head.txt").string();
  int code = -1;
  const auto rows = json_lines("kv-eval -m " + model + " -f " + text +
                                   " -c 256 --chunks 4 --types q8_0,q4_0,q4_0+hadamard --json -t 2 --no-speed",
                               &code);
  ASSERT_EQ(code, 0);
  ASSERT_EQ(rows.size(), 3u);
  const double q8 = rows[0]["kld_mean"], q4 = rows[1]["kld_mean"];
  EXPECT_GT(q8, 0.0);
  EXPECT_LT(q8 * 20, q4);
  EXPECT_GE(rows[0]["top1"].get<double>(), 0.98);
  EXPECT_EQ(rows[2]["type"], "q4_0+hadamard");
}

// The decode speeds at d512 and d8192 are measured (on the smallest model: 8192 tokens of
// prefill per type stay quick under the sanitizers too).
TEST(KvEvalCli, MeasuresDecodeAtBothDepths) {
  const std::string model = (test::repo_dir() / "models/stories260K.gguf").string();
  const std::string text = (test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt").string();
  int code = -1;
  const auto rows = json_lines("kv-eval -m " + model + " -f " + text + " -c 64 --types f16 --json -t 2 --n-gen 4 -r 1",
                               &code);
  ASSERT_EQ(code, 0);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(rows[0]["tg_512"].get<double>(), 0.0);
  EXPECT_GT(rows[0]["tg_8192"].get<double>(), 0.0);
}

}  // namespace
}  // namespace okapi
