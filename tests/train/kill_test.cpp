// Crash safety of `okapi train`: SIGKILL at (seeded) random moments, with a checkpoint written
// after every step, never leaves a checkpoint that fails to load and verify; resuming after each
// kill continues the same loss curve an uninterrupted run has. Ctrl-C (SIGINT) saves the state
// and exits with 130.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "support/paths.hpp"
#include "support/cli.hpp"
#include "support/train_runs.hpp"
#include "train/checkpoint.hpp"

namespace okapi::train {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::vector<std::string> train_args(const fs::path& text, const fs::path& out, bool resume) {
  if (resume) return {"train", "--resume", out.string(), "-t", "1", "--log-every", "1000"};
  return {"train", "--data", text.string(), "--tokenizer", (test::repo_dir() / "models" / "tok512.bin").string(),
          "--config", "stories260K", "--layers", "2", "--steps", "100000", "--batch", "2", "--seq", "32",
          "--seed", "11", "--eval-every", "0", "--save-every", "1", "--keep", "3", "--sample-tokens", "0",
          "--log-every", "1000", "-t", "1", "--out", out.string()};
}

// Starts the okapi binary (no shell in between, so signals reach it), output to `log`.
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    std::vector<char*> argv;
    std::string binary = test::cli_path().string();
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid, int* signal_number) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  *signal_number = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The step of the newest checkpoint that loads (0: none yet). A checkpoint being written is
// invisible: only the final name counts, and it appears complete.
int64_t newest_step(const fs::path& run) {
  const auto all = list_checkpoints(run);
  try {
    return all.empty() ? 0 : load_checkpoint(all.back()).meta.step;
  } catch (const Error&) {  // pruned by the running trainer between listing and loading
    return 0;
  }
}

std::vector<std::string> loss_rows(const fs::path& csv, int64_t through_step) {
  std::ifstream in(csv);
  std::string line;
  std::vector<std::string> rows;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string step, loss;
    std::getline(fields, step, ',');
    std::getline(fields, loss, ',');
    if (std::stoll(step) <= through_step) rows.push_back(step + "," + loss);
  }
  return rows;
}

TEST(TrainKill, SigkillNeverLeavesACorruptCheckpointAndResumeContinuesTheCurve) {
  const fs::path dir = test::make_temp_dir("train-kill");
  const fs::path text = test::write_story_text(dir), run = dir / "run", log = dir / "log.txt";
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> delay_ms(0, 80);
  int64_t last_step = 0, kills_with_checkpoints = 0, killed_mid_write = 0;
  for (int kill = 0; kill < 7; ++kill) {
    const bool resume = !list_checkpoints(run).empty();
    const pid_t pid = spawn(train_args(text, run, resume), log);
    ASSERT_GT(pid, 0);
    // Let the run get past its start-up (tokenizing, resuming) into checkpointing after every
    // step, then kill it a random moment later.
    for (int i = 0; i < 1000 && newest_step(run) <= last_step; ++i) std::this_thread::sleep_for(5ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(pid, SIGKILL);
    int sig = 0;
    wait_exit(pid, &sig);
    ASSERT_EQ(sig, SIGKILL) << test::read_file(log);
    const auto checkpoints = list_checkpoints(run);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(checkpoint_dir(run), ec)) {
      killed_mid_write += entry.path().filename().string().find(".tmp.") != std::string::npos ? 1 : 0;
    }
    for (const fs::path& path : checkpoints) {
      Checkpoint ck;
      ASSERT_NO_THROW(ck = load_checkpoint(path)) << "after kill " << kill << ": " << path;
      EXPECT_EQ(path.filename(), checkpoint_path(run, ck.meta.step).filename());
    }
    if (!checkpoints.empty()) {
      const int64_t step = load_checkpoint(checkpoints.back()).meta.step;
      EXPECT_GE(step, last_step) << "a resume went backwards";
      last_step = step;
      ++kills_with_checkpoints;
    }
  }
  // Informational: how many kills landed while a checkpoint was being written (a temp file left).
  std::printf("kills: 7, with checkpoints: %lld, mid-write: %lld, last step %lld\n",
              static_cast<long long>(kills_with_checkpoints), static_cast<long long>(killed_mid_write),
              static_cast<long long>(last_step));
  ASSERT_EQ(kills_with_checkpoints, 7) << test::read_file(log);
  ASSERT_GT(last_step, 0);

  // Finish a few steps past the last kill, then compare with one uninterrupted run.
  auto finish = train_args(text, run, true);
  finish.insert(finish.end(), {"--stop-after", "3"});
  int sig = 0;
  ASSERT_EQ(wait_exit(spawn(finish, log), &sig), 0) << test::read_file(log);
  const int64_t end = last_step + 3;
  auto straight = train_args(text, dir / "straight", false);
  straight.insert(straight.end(), {"--stop-after", std::to_string(end)});
  ASSERT_EQ(wait_exit(spawn(straight, log), &sig), 0) << test::read_file(log);
  const auto want = loss_rows(dir / "straight" / "train.csv", end);
  ASSERT_EQ(want.size(), static_cast<size_t>(end));
  EXPECT_EQ(loss_rows(run / "train.csv", end), want);
  fs::remove_all(dir);
}

TEST(TrainKill, SigintSavesTheStateAndExitsWith130) {
  const fs::path dir = test::make_temp_dir("train-sigint");
  const fs::path text = test::write_story_text(dir), run = dir / "run", log = dir / "log.txt";
  auto args = train_args(text, run, false);
  *(std::find(args.begin(), args.end(), "--save-every") + 1) = "1000";  // only Ctrl-C writes a checkpoint
  const pid_t pid = spawn(args, log);
  // Wait until training is under way (the CSV has a data row), then interrupt.
  for (int i = 0; i < 400 && test::read_file(run / "train.csv").find("\n1,") == std::string::npos; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ::kill(pid, SIGINT);
  int sig = 0;
  const int code = wait_exit(pid, &sig);
  const std::string output = test::read_file(log);
  EXPECT_EQ(code, 130) << output;
  EXPECT_NE(output.find("interrupted; continue with: okapi train --resume"), std::string::npos) << output;
  const auto checkpoints = list_checkpoints(run);
  ASSERT_EQ(checkpoints.size(), 1u) << output;
  const Checkpoint ck = load_checkpoint(checkpoints.back());
  const auto rows = loss_rows(run / "train.csv", 1 << 30);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(ck.meta.step, static_cast<int64_t>(rows.size()));  // the state of the last logged step
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::train
