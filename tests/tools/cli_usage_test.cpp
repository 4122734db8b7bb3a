// The command line as a user meets it: every error is okapi's own ("okapi: error: ..."), usage
// errors exit with 2, nothing reaches stdout before the arguments are known to be valid, and the
// habits llama.cpp users bring (-f, -s, last value wins, -o md|csv|json|jsonl) work. The verbs and
// their flags are read from the binary's own --help, so a new verb or flag is covered unasked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace fs = std::filesystem;
using okapi::test::CommandResult;
using okapi::test::run_cli;
using okapi::test::run_command;

namespace {

const std::string kModel = (okapi::test::repo_dir() / "models" / "stories260K.gguf").string();

// stdout alone (stderr discarded), to check that a failing command printed nothing there.
CommandResult run_cli_stdout(const std::string& args) {
  std::string command = "(";  // a subshell, as run_command appends its own 2>&1
  command += okapi::test::cli_path().string() + " " + args + " 2>/dev/null)";
  return run_command(command);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The verbs listed under "Subcommands:" in `okapi --help`.
std::vector<std::string> verbs() {
  const CommandResult r = run_cli("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> out;
  bool in_list = false;
  const std::regex entry(R"(^  ([a-z][a-z0-9-]*)\s)");
  for (const auto& line : lines(r.output)) {
    if (line.rfind("Subcommands:", 0) == 0) {
      in_list = true;
      continue;
    }
    std::smatch m;
    if (in_list && std::regex_search(line, m, entry)) out.push_back(m[1]);
  }
  return out;
}

struct Flag {
  std::string name;   // the long name when there is one
  bool takes_value;   // CLI11 shows a type (TEXT, INT, ...) after the names
};

// The flags of `okapi VERB --help` (not --help itself).
std::vector<Flag> flags_of(const std::string& verb) {
  const CommandResult r = run_cli(verb + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<Flag> out;
  const std::regex option(R"(^  ((?:-[A-Za-z],)?(-{1,2}[A-Za-z][A-Za-z0-9-]*))( [A-Z]+\b)?)");
  for (const auto& line : lines(r.output)) {
    std::smatch m;
    if (!std::regex_search(line, m, option)) continue;
    const std::string names = m[1];
    const std::string name = names.substr(names.rfind(',') == std::string::npos ? 0 : names.rfind(',') + 1);
    if (name == "--help" || name == "-h") continue;
    out.push_back({name, m[3].matched});
  }
  return out;
}

// `prefix` then `length` random letters (built in place: gcc 12 warns falsely on "x" + string).
std::string random_word(std::mt19937& rng, size_t length, const char* prefix = "") {
  std::uniform_int_distribution<int> letter('a', 'z');
  std::string s = prefix;
  for (size_t i = 0; i < length; ++i) s.push_back(static_cast<char>(letter(rng)));
  return s;
}

void expect_usage_error(const std::string& args, const std::string& expected) {
  SCOPED_TRACE(args);
  const CommandResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("okapi: error: ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  EXPECT_EQ(lines(r.output).size(), 1u) << "one line, no CLI11 usage dump:\n" << r.output;
  EXPECT_EQ(run_cli_stdout(args).output, "") << "stdout must stay empty on a usage error";
}

fs::path write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST(CliUsage, HelpListsEveryVerbAndEachVerbHasHelp) {
  const auto all = verbs();
  ASSERT_GE(all.size(), 10u);
  for (const auto& verb : all) {
    const CommandResult r = run_cli_stdout(verb + " --help");
    EXPECT_EQ(r.exit_code, 0) << verb;
    EXPECT_NE(r.output.find(verb), std::string::npos) << r.output;
  }
  EXPECT_EQ(run_cli("--version").exit_code, 0);
}

TEST(CliUsage, NoVerbAndUnknownVerbsAreUsageErrorsThatListTheVerbs) {
  const auto all = verbs();
  expect_usage_error("", "no verb given");
  std::mt19937 rng(7);
  for (int i = 0; i < 8; ++i) {
    const std::string word = random_word(rng, 6, "x");
    expect_usage_error(word, "unknown verb '" + word + "'");
    const CommandResult r = run_cli(word);
    for (const auto& verb : all) EXPECT_NE(r.output.find(verb), std::string::npos) << r.output;
  }
  // A typo gets the nearest verb: swap two letters of each verb.
  for (const auto& verb : all) {
    std::string typo = verb;
    std::swap(typo[0], typo[1]);
    if (typo == verb) continue;
    expect_usage_error(typo, "did you mean '" + verb + "'");
  }
  expect_usage_error("--frobnicate", "comes before a verb");
}

TEST(CliUsage, EveryVerbRejectsUnknownFlagsAndFlagsWithoutTheirValue) {
  std::mt19937 rng(11);
  for (const auto& verb : verbs()) {
    for (int i = 0; i < 3; ++i) {
      const std::string flag = random_word(rng, 3 + static_cast<size_t>(i), "--zz");
      expect_usage_error(verb + " " + flag, "unknown flag '" + flag + "'");
    }
    size_t index = 0;
    for (const Flag& f : flags_of(verb)) {
      if (!f.takes_value) continue;
      // A process per flag: under the sanitizers (-O0) every third flag; the Release run checks all.
      if (okapi::test::sanitized_run() && index++ % 3 != 0) continue;
      expect_usage_error(verb + " " + f.name, f.name);
    }
  }
}

TEST(CliUsage, VerbsWithRequiredArgumentsSayWhatIsMissing) {
  for (const auto& verb : verbs()) {
    // run, serve and chat have defaults for everything (the bundled model); train says it itself.
    if (verb == "run" || verb == "serve" || verb == "chat" || verb == "train") continue;
    SCOPED_TRACE(verb);
    const CommandResult r = run_cli(verb);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.rfind("okapi: error: " + verb + ": ", 0), 0u) << r.output;
    EXPECT_EQ(run_cli_stdout(verb).output, "");
  }
}

TEST(CliUsage, ValuesOutOfRangeAreRefusedWithTheRange) {
  const std::string m = " -m " + kModel;
  expect_usage_error("run" + m + " --top-p 2", "--top-p: 2 is out of range [0, 1]");
  expect_usage_error("run" + m + " --min-p -0.5", "--min-p: -0.5 is out of range [0, 1]");
  expect_usage_error("run" + m + " -c -1", "--ctx-size: -1 is out of range [0, ");
  expect_usage_error("run" + m + " --seed 4294967296", "4294967296 is out of range [-1, 4294967295]");
  expect_usage_error("run" + m + " -s -2", "-2 is out of range [-1, 4294967295]");
  expect_usage_error("run" + m + " -t 0", "0 is out of range [1, ");
  expect_usage_error("run" + m + " -n -5", "-5 is out of range [-1, ");
  expect_usage_error("run" + m + " --temp nan", "'nan' is not a number");
  expect_usage_error("run" + m + " --top-p abc", "'abc' is not a number");
  expect_usage_error("perplexity" + m + " -f x.txt -b 0", "0 is out of range [1, ");
  expect_usage_error("synth --preset stories15M -o x.gguf --layers 0", "--layers: 0 is out of range [1, ");
  expect_usage_error("synth --preset stories15M -o x.gguf --seed 99999999999", "out of range [0, 4294967295]");
  expect_usage_error("logits" + m + " --tokens '' -o x.bin", "--tokens: the list is empty");
  expect_usage_error("logits" + m + " --tokens 1,,2 -o x.bin", "'' is not a number");
  expect_usage_error("bench" + m + " -t 1,0", "0 is out of range [1, ");
  expect_usage_error("bench" + m + " -o yaml", "yaml");
  expect_usage_error("train --steps 0", "--steps: 0 is out of range [1, ");
  expect_usage_error("run" + m + " -ctk q9_9", "unsupported KV cache type 'q9_9'");
  expect_usage_error("quantize " + kModel + " out.gguf Q9_Z", "Q9_Z");
}

TEST(CliUsage, ARepeatedFlagTakesItsLastValue) {
  const CommandResult once = run_cli("tokenize -m " + kModel + " -p 'the end' --ids");
  const CommandResult twice = run_cli("tokenize -m " + kModel + " -p 'a cat' -p 'the end' --ids");
  ASSERT_EQ(once.exit_code, 0) << once.output;
  EXPECT_EQ(twice.output, once.output);
  const CommandResult json = run_cli_stdout("run -m " + kModel + " -n 9 -n 2 --temp 0 -t 1 --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(nlohmann::json::parse(json.output)["generated_tokens"], 2);
}

TEST(CliUsage, PromptFromAFileOfAnySizeAndSeedShortFlag) {
  const fs::path dir = okapi::test::make_temp_dir("cli-usage");
  const fs::path small = write_file(dir / "prompt.txt", "Once upon a time");
  const CommandResult from_file = run_cli_stdout("run -m " + kModel + " -f " + small.string() + " -n 8 -s 42 --temp 1 -t 1 "
                                          "--json");
  const CommandResult from_flag = run_cli_stdout("run -m " + kModel + " -p 'Once upon a time' -n 8 --seed 42 --temp 1 -t 1 "
                                          "--json");
  ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
  ASSERT_EQ(from_flag.exit_code, 0) << from_flag.output;
  EXPECT_EQ(nlohmann::json::parse(from_file.output)["tokens"], nlohmann::json::parse(from_flag.output)["tokens"]);

  // 5 MB cannot pass through argv; from a file it reaches the tokenizer (and the context check).
  const fs::path big = write_file(dir / "big.txt", std::string(5u << 20, 'a'));
  const CommandResult r = run_cli("run -m " + kModel + " -f " + big.string() + " -c 64 -n 1");
  EXPECT_EQ(r.exit_code, 1) << r.output.substr(0, 300);
  EXPECT_NE(r.output.find("the prompt has"), std::string::npos) << r.output.substr(0, 300);
  expect_usage_error("run -m " + kModel + " -p hi -f " + small.string(), "excludes");
  fs::remove_all(dir);
}

TEST(CliUsage, FilesGivenByMistakeGetActionableErrors) {
  const fs::path dir = okapi::test::make_temp_dir("cli-usage-files");
  const std::string bin = (okapi::test::repo_dir() / "models" / "stories260K.bin").string();
  const std::string tok = (okapi::test::repo_dir() / "models" / "tok512.bin").string();
  const fs::path empty = write_file(dir / "empty.gguf", "");
  const fs::path text = write_file(dir / "notes.txt", "hello, this is not a model");
  const struct {
    std::string args, expected;
  } cases[] = {
      {"run -m " + dir.string(), "is a directory"},
      {"perplexity -m " + dir.string() + " -f " + text.string(), "is a directory"},
      {"run -m " + (dir / "missing.gguf").string(), "does not exist"},
      {"run -m " + bin, "okapi convert"},
      {"logits -m " + bin + " -p hi -o " + (dir / "x.bin").string(), "llama2.c checkpoint"},
      {"bench -m " + tok, "tokenizer.bin"},
      {"run -m " + empty.string(), "empty"},
      {"run -m " + text.string(), "not a GGUF model"},
      {"perplexity -m " + kModel + " -f " + dir.string(), "is a directory"},
      {"tokenize -m " + kModel + " -f " + (dir / "nope.txt").string(), "does not exist"},
      {"inspect " + dir.string(), "is a directory"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const CommandResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("okapi: error: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(run_cli_stdout(c.args).output, "");
  }
  fs::remove_all(dir);
}

TEST(CliUsage, BenchWritesLlamaBenchFormats) {
  const std::string base = "bench -m " + kModel + " -p 8 -n 4 -r 1 -t 1,1 ";
  const CommandResult json = run_cli_stdout(base + "-o json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const auto array = nlohmann::json::parse(json.output);
  ASSERT_TRUE(array.is_array());
  ASSERT_EQ(array.size(), 4u);
  for (const auto& rec : array)
    for (const char* key : {"model_filename", "model_size", "model_n_params", "n_threads", "n_prompt", "n_gen",
                            "avg_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts", "type_k", "type_v", "test"})
      EXPECT_TRUE(rec.contains(key)) << key;

  const CommandResult jsonl = run_cli_stdout(base + "-o jsonl");
  ASSERT_EQ(jsonl.exit_code, 0);
  const auto jsonl_lines = lines(jsonl.output);
  ASSERT_EQ(jsonl_lines.size(), 4u) << jsonl.output;
  for (const auto& line : jsonl_lines) EXPECT_TRUE(nlohmann::json::parse(line).is_object());

  const CommandResult csv = run_cli_stdout(base + "-o csv");
  ASSERT_EQ(csv.exit_code, 0);
  const auto csv_lines = lines(csv.output);
  ASSERT_EQ(csv_lines.size(), 5u) << csv.output;
  const auto fields = [](const std::string& line) {
    size_t n = 1;
    bool quoted = false;
    for (const char c : line) {
      if (c == '"') quoted = !quoted;
      if (c == ',' && !quoted) ++n;
    }
    return n;
  };
  EXPECT_EQ(csv_lines[0].rfind("model_filename,", 0), 0u) << csv_lines[0];
  for (const auto& line : csv_lines) EXPECT_EQ(fields(line), fields(csv_lines[0])) << line;

  const CommandResult md = run_cli_stdout(base + "-o md");
  ASSERT_EQ(md.exit_code, 0);
  const auto md_lines = lines(md.output);
  ASSERT_EQ(md_lines.size(), 6u) << md.output;
  EXPECT_EQ(md_lines[0], "| model | size | params | backend | threads | type_k | type_v | test | t/s |");
}

// -d D (llama-bench's depth): each test runs over a cache already holding D tokens, named as
// llama-bench names it; a depth that does not fit the model's context is refused like -p/-n.
TEST(CliUsage, BenchRunsTestsAtDepth) {
  const CommandResult r = run_cli_stdout("bench -m " + kModel + " -p 8 -n 4 -d 0,16 -r 1 -t 1 -o jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> tests;
  for (const auto& line : lines(r.output)) {
    const auto rec = nlohmann::json::parse(line);
    tests.push_back(rec["test"].get<std::string>());
    EXPECT_EQ(rec["n_depth"].get<int64_t>(), tests.back().find("@ d16") != std::string::npos ? 16 : 0);
    EXPECT_GT(rec["avg_ts"].get<double>(), 0.0);
  }
  EXPECT_EQ(tests, (std::vector<std::string>{"pp8", "tg4", "pp8 @ d16", "tg4 @ d16"}));
  expect_usage_error("bench -m " + kModel + " -d -1", "-d");
}
