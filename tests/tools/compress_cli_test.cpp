// okapi compress as a user runs it: the plan on stdout, a smaller model that `okapi inspect` shows
// with its factors and that `okapi perplexity` runs, and clear errors (exit 2 for a bad flag
// value, 1 for a request the model cannot serve) with nothing written over the input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::string model() { return (test::repo_dir() / "models/stories260K.gguf").string(); }

TEST(CompressCli, WritesASmallerModelTheEngineRuns) {
  const fs::path out = fs::temp_directory_path() / ("okapi-compress-" + std::to_string(::getpid()) + ".gguf");
  const auto r = test::run_cli("compress -m " + model() + " -o " + out.string() + " --method svd --ratio 0.15 --type f16");
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

// The calibrated default (best), a ranks file, and quantized factors.
TEST(CompressCli, CalibratedRanksFileAndQuantizedFactors) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-compress-calib-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string text = (test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt").string();
  const auto best = test::run_cli("compress -m " + model() + " -o " + (dir / "best.gguf").string() + " --calib " + text +
                                  " --ratio 0.1 --type q8_0 -t 1");
  ASSERT_EQ(best.exit_code, 0) << best.output;
  EXPECT_NE(best.output.find("calibrated on"), std::string::npos) << best.output;
  EXPECT_NE(best.output.find("method best"), std::string::npos) << best.output;
  EXPECT_NE(best.output.find("factored (q8_0)"), std::string::npos) << best.output;
  write_text(dir / "ranks.txt", "# name rank\nblk.0.attn_q 16\nblk.1.ffn_down.weight 8\n");
  const auto file = test::run_cli("compress -m " + model() + " -o " + (dir / "file.gguf").string() +
                                  " --method svd --ranks " + (dir / "ranks.txt").string());
  ASSERT_EQ(file.exit_code, 0) << file.output;
  EXPECT_NE(file.output.find("2 of 35 projections factored"), std::string::npos) << file.output;
  const auto ppl = test::run_cli("perplexity -m " + (dir / "best.gguf").string() + " -f " + text + " -c 64 -t 1");
  EXPECT_EQ(ppl.exit_code, 0) << ppl.output;
  fs::remove_all(dir);
}

TEST(CompressCli, ClearErrors) {
  const fs::path out = fs::temp_directory_path() / ("okapi-compress-bad-" + std::to_string(::getpid()) + ".gguf");
  const std::string text = (test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt").string();
  for (const std::string& flags : std::vector<std::string>{"--method svd --ratio 0", "--method svd --ratio 1", "--method svd --ratio 1.5", "--ratio 0.2 --method nope",
        "--method svd --ratio 0.2 --type nope", "--method svd", "--ratio 0.2 --method svd-llm",
        "--ratio 0.2 --method svd --calib " + text}) {
    const auto r = test::run_cli("compress -m " + model() + " -o " + out.string() + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.output;
    EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << r.output;
  }
  for (const std::string missing : {"--method svd --ranks /no/such/ranks.txt", "--calib /no/such/text.txt --ratio 0.2"}) {
    const auto r = test::run_cli("compress -m " + model() + " -o " + out.string() + " " + missing);
    EXPECT_NE(r.exit_code, 0) << missing;
    EXPECT_NE(r.output.find("okapi: error: --"), std::string::npos) << r.output;
  }
  const auto too_much = test::run_cli("compress -m " + model() + " -o " + out.string() + " --method svd --ratio 0.95");
  EXPECT_EQ(too_much.exit_code, 1);
  EXPECT_NE(too_much.output.find("removes at most"), std::string::npos) << too_much.output;
  EXPECT_FALSE(fs::exists(out));
  const fs::path ranks = fs::temp_directory_path() / ("okapi-compress-ranks-" + std::to_string(::getpid()) + ".txt");
  for (const std::string bad : {"blk.0.attn_q 9999\n", "blk.0.attn_q\n", "blk.0.no_such 4\n", "blk.0.attn_q -3\n"}) {
    write_text(ranks, bad);
    const auto r = test::run_cli("compress -m " + model() + " -o " + out.string() + " --method svd --ranks " + ranks.string());
    EXPECT_EQ(r.exit_code, 1) << bad << r.output;
    EXPECT_NE(r.output.find("okapi: error: compress: " + ranks.string()), std::string::npos) << r.output;
  }
  fs::remove(ranks);
  EXPECT_FALSE(fs::exists(out));
  const auto self = test::run_cli("compress -m " + model() + " -o " + model() + " --method svd --ratio 0.2");
  EXPECT_NE(self.exit_code, 0);
  EXPECT_NE(self.output.find("okapi: error:"), std::string::npos) << self.output;
}

}  // namespace
}  // namespace okapi
