// `okapi train --resume` skips a newest checkpoint that fails verification (truncated, a flipped
// byte, foreign magic, empty, deleted), warns naming it and why, moves it aside and continues
// from the newest good one; with no good checkpoint it stops with every reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "support/cli.hpp"
#include "support/paths.hpp"
#include "train/checkpoint.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;

class CheckpointFallback : public ::testing::Test {
 protected:
  // Three checkpoints (steps 1, 2, 3) of a tiny run.
  void SetUp() override {
    dir_ = test::make_temp_dir("checkpoint-fallback");
    run_ = dir_ / "run";
    const auto r = test::run_cli("train --data " + (test::repo_dir() / "examples" / "story.txt").string() +
                                 " --tokenizer " + (test::repo_dir() / "models" / "tok512.bin").string() +
                                 " --layers 1 --steps 3 --batch 1 --seq 16 --save-every 1 --keep 3 --eval-windows 1"
                                 " --sample-tokens 0 -t 1 -q --out " + run_.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_EQ(list_checkpoints(run_).size(), 3u);
  }
  void TearDown() override { fs::remove_all(dir_); }

  test::CommandResult resume() const { return test::run_cli("train --resume " + run_.string() + " --steps 4 -q"); }

  // Damages the step-3 checkpoint; the resume must say so and go on from step 2 to step 4.
  void expect_fallback(const std::function<void(const fs::path&)>& damage, const std::string& why) const {
    const fs::path newest = checkpoint_path(run_, 3);
    damage(newest);
    const auto r = resume();
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (fs::exists(newest.string() + ".corrupt")) {
      EXPECT_NE(r.output.find("okapi: warning: skipping checkpoint '" + newest.string() + "'"), std::string::npos)
          << r.output;
      EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
    } else {
      EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;  // nothing there to warn about
    }
    EXPECT_NE(r.output.find("resuming from " + checkpoint_path(run_, 2).string() + " (step 2)"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("final: step 4"), std::string::npos) << r.output;
    EXPECT_EQ(load_checkpoint(list_checkpoints(run_).back()).meta.step, 4);
    const auto again = resume();  // the bad file is out of the way now
    EXPECT_EQ(again.exit_code, 0) << again.output;
    EXPECT_EQ(again.output.find("warning"), std::string::npos) << again.output;
  }

  static void rewrite(const fs::path& path, const std::function<void(std::string&)>& change) {
    std::string bytes = test::read_file(path);
    change(bytes);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  fs::path dir_, run_;
};

TEST_F(CheckpointFallback, TruncatedNewest) {
  expect_fallback([](const fs::path& p) { rewrite(p, [](std::string& b) { b.resize(b.size() / 2); }); },
                  "is corrupt");
}

TEST_F(CheckpointFallback, FlippedByteInTheMiddle) {
  expect_fallback([](const fs::path& p) { rewrite(p, [](std::string& b) { b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x10); }); },
                  "is corrupt");
}

TEST_F(CheckpointFallback, ForeignMagic) {
  expect_fallback([](const fs::path& p) { rewrite(p, [](std::string& b) { b[0] = 'X'; }); },
                  "is not an okapi checkpoint");
}

TEST_F(CheckpointFallback, EmptyFile) {
  expect_fallback([](const fs::path& p) { rewrite(p, [](std::string& b) { b.clear(); }); },
                  "is not an okapi checkpoint");
}

TEST_F(CheckpointFallback, DeletedNewest) {
  expect_fallback([](const fs::path& p) { fs::remove(p); }, "");
}

TEST_F(CheckpointFallback, NoGoodCheckpointIsAnErrorListingEachReason) {
  for (int64_t step = 1; step <= 3; ++step) {
    rewrite(checkpoint_path(run_, step), [](std::string& b) { b[b.size() / 3] = static_cast<char>(b[b.size() / 3] ^ 1); });
  }
  const auto r = resume();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("okapi: error: the run '" + run_.string() +
                          "' cannot be resumed: none of its 3 checkpoints can be used"),
            std::string::npos)
      << r.output;
  for (int64_t step = 1; step <= 3; ++step) {
    EXPECT_NE(r.output.find(checkpoint_path(run_, step).string() + "' is corrupt"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(checkpoint_path(run_, step).string() + ".corrupt"));  // nothing moved
  }
}

}  // namespace
}  // namespace okapi::train
