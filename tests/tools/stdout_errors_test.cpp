// A failed write to stdout is an okapi error: with stdout on /dev/full (every write fails with
// ENOSPC) each verb that prints exits 1 with one "okapi: error: writing to stdout: ..." line on
// stderr, whether it printed with printf, fmt::print or std::cout, a little or a lot.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

const std::string kModel = (test::repo_dir() / "models" / "stories260K.gguf").string();

// Runs okapi with stdout sent to `sink`; stderr is what comes back.
test::CommandResult with_stdout_to(const std::string& sink, const std::string& args) {
  // The subshell keeps the helper's 2>&1 from following stdout into the sink.
  return test::run_command("( " + test::shell_quote(test::cli_path().string()) + " " + args + " >" + sink + " )");
}

size_t count(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

const std::vector<std::string>& printing_commands() {
  static const std::vector<std::string> commands = {
      "run -m " + kModel + " -p 'Once upon a time' -n 4 -t 1 --seed 1",
      "run -m " + kModel + " -p 'Once upon a time' -n 4 -t 1 --seed 1 --json",
      "tokenize -m " + kModel + " -p 'the end'",
      "tokenize -m " + kModel + " -p 'the end' --ids",
      "bench -m " + kModel + " -p 8 -n 4 -t 1 -r 1",
      "inspect " + kModel,
      "inspect " + kModel + " --json",
      "--help",
      "run --help",
  };
  return commands;
}

TEST(StdoutErrors, AFullStdoutIsAnError) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  for (const std::string& command : printing_commands()) {
    const auto r = with_stdout_to("/dev/full", command);
    EXPECT_EQ(r.exit_code, 1) << command << "\n" << r.output;
    EXPECT_NE(r.output.find("okapi: error: writing to stdout: No space left on device\n"), std::string::npos)
        << command << "\n" << r.output;
    EXPECT_EQ(count(r.output, "okapi: error:"), 1u) << command << "\n" << r.output;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << command << "\n" << r.output;
  }
}

TEST(StdoutErrors, TheSameCommandsSucceedWhenStdoutTakesTheirOutput) {
  for (const std::string& command : printing_commands()) {
    const auto r = with_stdout_to("/dev/null", command);
    EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
    EXPECT_EQ(r.output.find("okapi: error:"), std::string::npos) << command << "\n" << r.output;
  }
}

}  // namespace
}  // namespace okapi
