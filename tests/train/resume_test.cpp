// Bit-identical resume: `okapi train` stopped after 10 of 20 steps and resumed gives the same
// loss (and held-out loss) at every step, and the same final weights and Adam moments, as one
// uninterrupted run of the same seed. Float and ternary, with gradient accumulation.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/paths.hpp"
#include "support/train_runs.hpp"
#include "train/checkpoint.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;

std::string base_args(const fs::path& text, const std::string& extra) {
  return "train --data " + text.string() + " --tokenizer " + (test::repo_dir() / "models" / "tok512.bin").string() +
         " --config stories260K --layers 2 --steps 20 --batch 3 --seq 32 --accum 2 --warmup 3 --lr 2e-3 --seed 7"
         " --eval-every 5 --eval-windows 4 --save-every 4 --sample-tokens 8 -t 2 " + extra;
}

void expect_identical_resume(const std::string& extra) {
  const fs::path dir = test::make_temp_dir("train-resume");
  const fs::path text = test::write_story_text(dir);
  const fs::path straight = dir / "straight", split = dir / "split";

  const auto a = test::run_cli(base_args(text, extra) + " --out " + straight.string());
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto b1 = test::run_cli(base_args(text, extra) + " --stop-after 10 --out " + split.string());
  ASSERT_EQ(b1.exit_code, 0) << b1.output;
  EXPECT_NE(b1.output.find("--stop-after"), std::string::npos) << b1.output;
  ASSERT_EQ(list_checkpoints(split).back().filename(), "step-00000010.ckpt");
  const auto b2 = test::run_cli("train --resume " + split.string() + " -t 1");  // thread count may differ
  ASSERT_EQ(b2.exit_code, 0) << b2.output;
  EXPECT_NE(b2.output.find("resuming after step 10"), std::string::npos) << b2.output;

  const auto want = test::loss_curve(straight / "train.csv"), got = test::loss_curve(split / "train.csv");
  ASSERT_EQ(want.size(), 21u);  // header + 20 steps
  EXPECT_EQ(got, want);
  const Checkpoint ca = load_checkpoint(list_checkpoints(straight).back());
  const Checkpoint cb = load_checkpoint(list_checkpoints(split).back());
  EXPECT_EQ(ca.meta.step, 20);
  EXPECT_EQ(cb.meta.step, 20);
  EXPECT_TRUE(ca.params == cb.params);
  EXPECT_TRUE(ca.adam_m == cb.adam_m);
  EXPECT_TRUE(ca.adam_v == cb.adam_v);
  EXPECT_EQ(ca.meta.sampler.rng, cb.meta.sampler.rng);
  EXPECT_EQ(ca.meta.sampler.windows_drawn, 20u * 2u * 3u);
  EXPECT_TRUE(fs::is_regular_file(split / "loss.svg"));
  fs::remove_all(dir);
}

TEST(TrainResume, FloatLossCurveIsBitIdenticalAfterResume) { expect_identical_resume(""); }

TEST(TrainResume, TernaryLossCurveIsBitIdenticalAfterResume) { expect_identical_resume("--ternary"); }

TEST(TrainResume, CurveDefiningFlagsMustMatchTheCheckpoint) {
  const fs::path dir = test::make_temp_dir("train-resume-flags");
  const fs::path text = test::write_story_text(dir);
  const auto first = test::run_cli(base_args(text, "--stop-after 2") + " --out " + (dir / "run").string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  for (const char* flag : {"--batch 4", "--lr 1e-3", "--seed 8", "--ternary", "--layers 3"}) {
    const auto r = test::run_cli("train --resume " + (dir / "run").string() + " " + flag);
    EXPECT_EQ(r.exit_code, 1) << flag << ": " << r.output;
    EXPECT_NE(r.output.find("differs from the checkpoint"), std::string::npos) << flag << ": " << r.output;
  }
  // Repeating a flag with the checkpoint's value is fine.
  const auto same = test::run_cli("train --resume " + (dir / "run").string() + " --batch 3 --stop-after 1 -q");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  // A new run may not reuse a run directory.
  const auto reuse = test::run_cli(base_args(text, "") + " --out " + (dir / "run").string());
  EXPECT_EQ(reuse.exit_code, 1);
  EXPECT_NE(reuse.output.find("already holds checkpoints"), std::string::npos) << reuse.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::train
