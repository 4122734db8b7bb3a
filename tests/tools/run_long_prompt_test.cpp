// okapi run with a prompt far larger than the context: refused as soon as that is known, after
// tokenizing a prefix of it, not all of it (a 50 MB file once took 82 s and 2.2 GB to be refused);
// the error is still true, and a prompt that fits is tokenized exactly as before.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/measured_run.hpp"
#include "support/paths.hpp"

namespace okapi::test {
namespace {

namespace fs = std::filesystem;

const std::string kModel = (repo_dir() / "models" / "stories260K.gguf").string();

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `bytes` of the bundled story, repeated.
fs::path write_story(const fs::path& path, size_t bytes) {
  const std::string story = read_file(repo_dir() / "examples" / "story.txt");
  std::string text;
  text.reserve(bytes + story.size());
  while (text.size() < bytes) text += story;
  text.resize(bytes);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(RunLongPrompt, AFileFarLargerThanTheContextIsRefusedFast) {
  const fs::path dir = make_temp_dir("run-long-prompt");
  const fs::path file = write_story(dir / "big.txt", size_t{32} << 20);  // 32 MiB
  const auto start = std::chrono::steady_clock::now();
  const MeasuredRun r = run_okapi_measured({"run", "-m", kModel, "-f", file.string(), "-n", "1", "-t", "1", "-c", "512"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("okapi: error: the prompt has more than 512 tokens (its first ", 0), 0u) << r.output;
  EXPECT_TRUE(contains(r.output, " of 33554432 bytes alone are ")) << r.output;
  EXPECT_TRUE(contains(r.output, "but the context holds only 512 (-c 512); use a larger -c")) << r.output;
  // Tokenizing all of it took ~50 s and ~1.4 GB; a prefix takes a fraction of a second (sanitizer
  // builds included) and the memory of reading the file.
  EXPECT_LT(seconds, 10.0);
  // Beyond okapi's own startup (work_rss_kb), which an ASan binary's size makes ~350 MB.
  EXPECT_LT(r.work_rss_kb, 400 * 1024);
  fs::remove_all(dir);
}

// What the early error claims is true: the whole prompt has more tokens than the context.
TEST(RunLongPrompt, TheEarlyErrorIsTrue) {
  const fs::path dir = make_temp_dir("run-long-prompt-true");
  const fs::path file = write_story(dir / "medium.txt", 8000);
  const CommandResult r = run_cli("run -m " + kModel + " -f " + file.string() + " -c 16 -n 1 -t 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "the prompt has more than 16 tokens (its first ")) << r.output;
  const CommandResult ids = run_command("( " + cli_path().string() + " tokenize -m " + kModel + " -f " +
                                        file.string() + " --ids --parse-special 2>/dev/null )");
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  EXPECT_GT(nlohmann::json::parse(ids.output).size(), 16u);
  fs::remove_all(dir);
}

// Prompts that fit, and ones just past the context, are handled as they always were: the prompt's
// tokens in --json are those of `okapi tokenize`, and one token too many gives the exact count.
TEST(RunLongPrompt, PromptsNearTheContextAreTokenizedExactly) {
  const fs::path dir = make_temp_dir("run-long-prompt-exact");
  const fs::path file = write_story(dir / "story.txt", 1500);
  const CommandResult ids = run_command("( " + cli_path().string() + " tokenize -m " + kModel + " -f " +
                                        file.string() + " --ids --parse-special 2>/dev/null )");
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  const auto tokens = nlohmann::json::parse(ids.output);
  const size_t n = tokens.size();
  const CommandResult fits = run_command("( " + cli_path().string() + " run -m " + kModel + " -f " + file.string() +
                                         " -c " + std::to_string(n + 1) + " -n 1 -t 1 --temp 0 --json 2>/dev/null )");
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  EXPECT_EQ(nlohmann::json::parse(fits.output)["prompt_tokens"], tokens);
  const CommandResult over = run_cli("run -m " + kModel + " -f " + file.string() + " -c " + std::to_string(n - 1) +
                                     " -n 1 -t 1");
  EXPECT_EQ(over.exit_code, 1) << over.output;
  EXPECT_TRUE(contains(over.output, "the prompt has " + std::to_string(n) + " tokens but the context holds only " +
                                        std::to_string(n - 1)))
      << over.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::test
