// okapi compress as a user runs it: the plan on stdout, a smaller model that `okapi inspect` shows
// with its factors and that `okapi perplexity` runs, and clear errors (exit 2 for a bad flag
// value, 1 for a request the model cannot serve) with nothing written over the input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;

std::string model() { return (test::repo_dir() / "models/stories260K.gguf").string(); }

TEST(CompressCli, WritesASmallerModelTheEngineRuns) {
  const fs::path out = fs::temp_directory_path() / ("okapi-compress-" + std::to_string(::getpid()) + ".gguf");
  const auto r = test::run_cli("compress -m " + model() + " -o " + out.string() + " --ratio 0.15 --type f16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| blk.0.attn_q.weight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("projections factored (f16)"), std::string::npos) << r.output;
  EXPECT_LT(fs::file_size(out), fs::file_size(model()));
  const auto info = test::run_cli("inspect " + out.string());
  EXPECT_NE(info.output.find("lr_in.weight"), std::string::npos);
  EXPECT_NE(info.output.find("okapi.compress.method"), std::string::npos);
  const auto ppl = test::run_cli("perplexity -m " + out.string() + " -f " +
                                 (test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt").string() +
                                 " -c 64 -t 1");
  EXPECT_EQ(ppl.exit_code, 0) << ppl.output;
  EXPECT_NE(ppl.output.find("Final estimate: PPL"), std::string::npos) << ppl.output;
  fs::remove(out);
}

TEST(CompressCli, ClearErrors) {
  const fs::path out = fs::temp_directory_path() / ("okapi-compress-bad-" + std::to_string(::getpid()) + ".gguf");
  for (const std::string flags : {"--ratio 0", "--ratio 1", "--ratio 1.5", "--ratio 0.2 --method grc", "--ratio 0.2 --type q4_0"}) {
    const auto r = test::run_cli("compress -m " + model() + " -o " + out.string() + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.output;
    EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << r.output;
  }
  const auto too_much = test::run_cli("compress -m " + model() + " -o " + out.string() + " --ratio 0.95");
  EXPECT_EQ(too_much.exit_code, 1);
  EXPECT_NE(too_much.output.find("removes at most"), std::string::npos) << too_much.output;
  EXPECT_FALSE(fs::exists(out));
  const auto self = test::run_cli("compress -m " + model() + " -o " + model() + " --ratio 0.2");
  EXPECT_NE(self.exit_code, 0);
  EXPECT_NE(self.output.find("okapi: error:"), std::string::npos) << self.output;
}

}  // namespace
}  // namespace okapi
