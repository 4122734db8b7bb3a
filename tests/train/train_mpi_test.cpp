// Data-parallel training over MPI: `mpirun -np 2 okapi train -t 1` gives the loss curve, the
// checkpointed weights and moments and the exported GGUF of one process at -t 2 with the same
// global batch, bit for bit; a run stopped by -np 2 resumes at -np 1 to the bits of the
// uninterrupted run. accum 3 over 2 ranks is an uneven split (2 + 1 micro-batches), so the
// exchange carries more than one tree node from a rank.
// SIGUSR1 (which mpirun forwards) stops every rank after the same step with a checkpoint.
// Skipped (failed under OKAPI_REQUIRE_GOLDEN) without mpirun on PATH or without MPI in this build.
// Under the sanitizers Open MPI's own allocations at exit are not okapi's: leak detection is off
// for the MPI processes (ASAN_OPTIONS detect_leaks=0), and the run is 8 steps instead of 20.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dist/communicator.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "support/train_runs.hpp"
#include "train/checkpoint.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;

int64_t steps() { return test::sanitized_run() ? 8 : 20; }

bool have_mpirun() { return test::run_command("command -v mpirun").exit_code == 0; }

std::string train_args(const fs::path& text) {
  return "train --data " + text.string() + " --tokenizer " + (test::repo_dir() / "models" / "tok512.bin").string() +
         " --config stories260K --steps " + std::to_string(steps()) +
         " --batch 2 --seq 32 --accum 3 --warmup 3 --lr 2e-3 --seed 11 --eval-every 5 --eval-windows 4"
         " --save-every 4 --sample-tokens 8";
}

test::CommandResult run_ranks(int ranks, const std::string& args) {
  std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                    "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 ";
  if (test::sanitized_run()) env += "ASAN_OPTIONS=detect_leaks=0 ";
  return test::run_command(env + "mpirun --oversubscribe --mca btl self,vader -np " + std::to_string(ranks) + " " +
                           test::shell_quote(test::cli_path().string()) + " " + args);
}

void expect_same_state(const fs::path& a, const fs::path& b) {
  const Checkpoint ca = load_checkpoint(list_checkpoints(a).back());
  const Checkpoint cb = load_checkpoint(list_checkpoints(b).back());
  EXPECT_EQ(ca.meta.step, steps());
  EXPECT_EQ(cb.meta.step, steps());
  EXPECT_TRUE(ca.params == cb.params);
  EXPECT_TRUE(ca.adam_m == cb.adam_m);
  EXPECT_TRUE(ca.adam_v == cb.adam_v);
  EXPECT_EQ(ca.meta.sampler.rng, cb.meta.sampler.rng);
  EXPECT_EQ(ca.meta.sampler.windows_drawn, cb.meta.sampler.windows_drawn);
}

#define REQUIRE_MPI()                                                                                 \
  do {                                                                                                \
    const char* missing = !dist::built_with_mpi() ? "this okapi was built without MPI"                \
                          : !have_mpirun()        ? "mpirun is not on PATH"                           \
                                                  : nullptr;                                          \
    if (missing != nullptr) {                                                                         \
      if (test::golden_required()) GTEST_FAIL() << "OKAPI_REQUIRE_GOLDEN: " << missing;               \
      GTEST_SKIP() << missing;                                                                        \
    }                                                                                                 \
  } while (0)

TEST(TrainMpi, TwoRanksGiveTheBitsOfOneProcessAndResumeAtOne) {
  REQUIRE_MPI();
  const fs::path dir = test::make_temp_dir("train-mpi");
  const fs::path text = test::write_story_text(dir);
  const fs::path one = dir / "one", two = dir / "two", split = dir / "split";

  const auto a = test::run_cli(train_args(text) + " -t 2 --out " + one.string() + " --export " +
                               (dir / "one.gguf").string());
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("train: 1 process x 2 threads"), std::string::npos) << a.output;
  const auto b = run_ranks(2, train_args(text) + " -t 1 --out " + two.string() + " --export " +
                                  (dir / "two.gguf").string());
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("train: 2 ranks x 1 thread"), std::string::npos) << b.output;
  // Rank 0 alone reports and exports.
  size_t exports = 0;
  for (size_t at = b.output.find("export: "); at != std::string::npos; at = b.output.find("export: ", at + 1)) ++exports;
  EXPECT_EQ(exports, 2u) << b.output;  // the summary and the engine check, once

  const auto want = test::loss_curve(one / "train.csv");
  ASSERT_EQ(want.size(), static_cast<size_t>(steps() + 1));
  EXPECT_EQ(test::loss_curve(two / "train.csv"), want);
  expect_same_state(one, two);
  EXPECT_EQ(test::read_file(dir / "two.gguf"), test::read_file(dir / "one.gguf"));

  // Stopped halfway by two ranks, finished by one.
  const auto c1 = run_ranks(2, train_args(text) + " -t 1 --stop-after " + std::to_string(steps() / 2) + " --out " +
                                   split.string());
  ASSERT_EQ(c1.exit_code, 0) << c1.output;
  const auto c2 = test::run_cli("train --resume " + split.string() + " -t 1 --export " + (dir / "split.gguf").string());
  ASSERT_EQ(c2.exit_code, 0) << c2.output;
  EXPECT_NE(c2.output.find(fmt::format("resuming after step {}", steps() / 2)), std::string::npos) << c2.output;
  EXPECT_EQ(test::loss_curve(split / "train.csv"), want);
  expect_same_state(one, split);
  EXPECT_EQ(test::read_file(dir / "split.gguf"), test::read_file(dir / "one.gguf"));
  fs::remove_all(dir);
}

// mpirun kills the job on SIGINT but forwards SIGUSR1: every rank stops after the same step,
// rank 0 saves a checkpoint, the job exits 130, and one process resumes it.
TEST(TrainMpi, Sigusr1StopsEveryRankWithACheckpoint) {
  REQUIRE_MPI();
  const fs::path dir = test::make_temp_dir("train-mpi-stop");
  const fs::path text = test::write_story_text(dir), run = dir / "run";
  std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                    "OMPI_MCA_btl_vader_single_copy_mechanism=none ";
  if (test::sanitized_run()) env += "ASAN_OPTIONS=detect_leaks=0 ";
  const std::string csv = test::shell_quote((run / "train.csv").string());
  // Waits (at most 60 s) for two logged steps, then signals mpirun.
  const auto r = test::run_command(
      env + "mpirun --oversubscribe --mca btl self,vader -np 2 " + test::shell_quote(test::cli_path().string()) + " " +
      "train --data " + text.string() + " --tokenizer " + (test::repo_dir() / "models" / "tok512.bin").string() +
      " --config stories260K --steps 1000000 --batch 2 --seq 32 --accum 2 --eval-every 0 -t 1 -q --out " +
      run.string() + " & p=$!; for i in $(seq 600); do [ -f " + csv + " ] && [ $(wc -l < " + csv +
      ") -ge 3 ] && break; sleep 0.1; done; kill -USR1 $p; wait $p; echo exit=$?");
  EXPECT_NE(r.output.find("exit=130"), std::string::npos) << r.output;
  const auto checkpoints = list_checkpoints(run);
  ASSERT_EQ(checkpoints.size(), 1u) << r.output;
  const int64_t step = load_checkpoint(checkpoints.back()).meta.step;
  EXPECT_GE(step, 2);
  const auto resumed = test::run_cli("train --resume " + run.string() + " -q --steps " + std::to_string(step + 2));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  fs::remove_all(dir);
}

TEST(TrainMpi, MoreRanksThanMicroBatchesIsRefused) {
  REQUIRE_MPI();
  const fs::path dir = test::make_temp_dir("train-mpi-ranks");
  const fs::path text = test::write_story_text(dir);
  const auto r = run_ranks(2, train_args(text) + " --accum 1 -t 1 --out " + (dir / "run").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 ranks need at least 2 micro-batches per step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--accum"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::train
