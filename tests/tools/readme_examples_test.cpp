// README.md's command examples work on a fresh clone: no command reads ../shared (the data folder
// a clone does not have), and every file they name under models/ or examples/ is in the repository.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/paths.hpp"

namespace okapi::test {
namespace {

// The lines of README.md's ```sh blocks.
std::vector<std::string> readme_commands() {
  std::istringstream in(read_file(repo_dir() / "README.md"));
  std::vector<std::string> out;
  bool in_block = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block && line == "```sh";
      continue;
    }
    if (in_block) out.push_back(line);
  }
  return out;
}

TEST(ReadmeExamples, CommandsNeedNothingButTheRepository) {
  const std::vector<std::string> commands = readme_commands();
  ASSERT_GT(commands.size(), 20u);
  const std::regex repo_file(R"((?:^|[\s=])((?:models|examples)/[A-Za-z0-9._/-]+))");
  size_t named = 0;
  for (const std::string& line : commands) {
    EXPECT_EQ(line.find("../shared"), std::string::npos) << "a fresh clone has no ../shared: " << line;
    for (std::sregex_iterator it(line.begin(), line.end(), repo_file), end; it != end; ++it) {
      ++named;
      EXPECT_TRUE(std::filesystem::exists(repo_dir() / (*it)[1].str())) << (*it)[1] << " in: " << line;
    }
  }
  EXPECT_GT(named, 10u);
}

}  // namespace
}  // namespace okapi::test
