// `okapi train` as a user runs it: the files a run leaves (CSV, SVG, checkpoints), evaluation and
// export reports, the bench mode, and a clear error with exit code 1 for every kind of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

#include "support/cli.hpp"
#include "support/paths.hpp"
#include "train/checkpoint.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;

const std::string kTok = (test::repo_dir() / "models" / "tok512.bin").string();
const std::string kStory = (test::repo_dir() / "examples" / "story.txt").string();

std::string tiny(const std::string& out) {
  return "train --data " + kStory + " --tokenizer " + kTok +
         " --layers 1 --steps 6 --batch 2 --seq 16 --eval-every 3 --eval-windows 2 --sample-tokens 6 -t 1 --out " +
         out + " ";
}

// exit_code 2: a usage error (a missing flag, a value out of range).
void expect_error(const std::string& args, const std::string& message, int exit_code = 1) {
  const auto r = test::run_cli(args);
  EXPECT_EQ(r.exit_code, exit_code) << args << "\n" << r.output;
  EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
}

TEST(TrainCli, ARunLeavesItsLogCurveAndCheckpointsAndExports) {
  const fs::path dir = test::make_temp_dir("train-cli");
  const fs::path out = dir / "run";
  const auto r = test::run_cli(tiny(out.string()) + "--export " + (dir / "m.gguf").string() + " --eval-model " +
                               (test::repo_dir() / "models" / "stories260K.gguf").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 3: held-out loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 6: sample:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("final: step 6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("export: held-out PPL: trainer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("eval-model: "), std::string::npos) << r.output;
  const std::string csv = test::read_file(out / "train.csv");
  EXPECT_EQ(csv.rfind("step,loss,lr,grad_norm,tokens_per_s,elapsed_s,eval_loss,eval_ppl\n1,", 0), 0u) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7);
  const std::string svg = test::read_file(out / "loss.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("<circle"), std::string::npos);  // the two held-out points
  ASSERT_EQ(list_checkpoints(out).size(), 1u);  // --save-every 100 > steps: the final one only
  EXPECT_TRUE(fs::is_regular_file(dir / "m.gguf"));
  EXPECT_FALSE(fs::is_empty(out / "cache"));
  // Extending a finished run by more steps continues it; the same steps again does nothing.
  const auto more = test::run_cli("train --resume " + out.string() + " --steps 8 -q");
  EXPECT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("final: step 8"), std::string::npos) << more.output;
  fs::remove_all(dir);
}

TEST(TrainCli, BenchModeReportsTokensPerSecond) {
  const fs::path dir = test::make_temp_dir("train-cli-bench");
  const auto r = test::run_cli(tiny((dir / "run").string()) + "--bench-steps 2 -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tok/s"), std::string::npos) << r.output;
  EXPECT_TRUE(list_checkpoints(dir / "run").empty());
  fs::remove_all(dir);
}

TEST(TrainCli, BadInputIsAClearError) {
  const fs::path dir = test::make_temp_dir("train-cli-bad");
  const std::string out = (dir / "run").string();
  expect_error("train --tokenizer " + kTok + " --out " + out, "--data FILE is required", 2);
  expect_error("train --data " + kStory + " --out " + out, "--tokenizer is required", 2);
  expect_error("train --data " + kStory + " --tokenizer " + kTok, "--out DIR is required", 2);
  expect_error("train --data /nonexistent.txt --tokenizer " + kTok + " --out " + out, "/nonexistent.txt");
  expect_error("train --data " + kStory + " --tokenizer /nonexistent.bin --out " + out, "/nonexistent.bin");
  expect_error("train --data " + kStory + " --tokenizer " + kStory + " --out " + out, "story.txt");
  expect_error(tiny(out) + "--config stories1B", "unknown model config 'stories1B'");
  expect_error(tiny(out) + "--heads 5", "not a multiple of n_heads");
  expect_error(tiny(out) + "--ctx 8", "longer than the config's context");
  expect_error(tiny(out) + "--accum 0", "--accum: 0 is out of range [1, ", 2);
  expect_error(tiny(out) + "--lr -1", "--lr: -1 is out of range [0, ", 2);
  expect_error(tiny(out) + "--init he", "--init: he not in {xavier,llama2c}", 2);
  expect_error(tiny(out) + "--held-out 1", "--held-out: 1 is out of range", 2);
  expect_error("train --data " + kStory + " --tokenizer " + kTok + " --seq 400 --out " + out, "seq + 1");
  expect_error("train --resume " + (dir / "none").string(), "no checkpoints");
  expect_error(tiny(out) + "--export " + (dir / "m.gguf").string() + " --export-type tq2_0", "exports as f32 or f16");

  // A damaged checkpoint is refused with the reason, not resumed from.
  const std::string damaged = (dir / "damaged").string();
  ASSERT_EQ(test::run_cli(tiny(damaged) + "-q").exit_code, 0);
  const fs::path ck = list_checkpoints(damaged).back();
  std::string bytes = test::read_file(ck);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  std::ofstream(ck, std::ios::binary) << bytes;
  expect_error("train --resume " + damaged, "is corrupt");
  expect_error("train --resume " + damaged + " --out " + (dir / "elsewhere").string(), "differ", 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::train
