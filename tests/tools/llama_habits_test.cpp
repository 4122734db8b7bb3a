// The flags llama.cpp users type out of habit: the harmless ones (-ngl, -fa, -no-cnv) are accepted
// with one note on stderr and change nothing; the ones okapi run cannot honour (-cnv, -i) are usage
// errors naming `okapi chat`; -e processes escapes as llama.cpp's does; bench -pg is llama-bench's
// prompt-then-generation test; synth --preset and inspect -m behave like the other verbs' flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::run_cli;
using test::run_command;

const std::string kModel = (test::repo_dir() / "models" / "stories260K.gguf").string();

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Only the stdout of `okapi ARGS` (run_command folds stderr in; the subshell drops it first).
CommandResult stdout_of(const std::string& args) {
  return run_command("( " + test::cli_path().string() + " " + args + " 2>/dev/null )");
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void expect_usage_error(const std::string& args, const std::string& message) {
  SCOPED_TRACE(args);
  const CommandResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("okapi: error: ", 0), 0u) << r.output;
  EXPECT_TRUE(contains(r.output, message)) << r.output;
  EXPECT_EQ(stdout_of(args).output, "") << "nothing on stdout before the arguments are valid";
}

const std::string kGreedy = "run -m " + kModel + " -p 'Once upon a time' -n 8 --temp 0 -t 1 ";

TEST(LlamaHabits, GpuLayersAndFlashAttentionAreIgnoredWithANote) {
  const CommandResult plain = stdout_of(kGreedy);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  for (const std::string flags : {"-ngl 99", "--n-gpu-layers 99", "--gpu-layers=all", "-ngl auto", "-fa", "-fa on",
                                  "--flash-attn off", "--flash-attn=auto", "-fa -ngl 99", "-no-cnv",
                                  "--no-conversation"}) {
    SCOPED_TRACE(flags);
    const CommandResult both = run_cli(kGreedy + flags);
    EXPECT_EQ(both.exit_code, 0) << both.output;
    const CommandResult out = stdout_of(kGreedy + flags);
    EXPECT_EQ(out.output, plain.output) << "the flag changes nothing";
    const std::string name = flags.substr(0, flags.find_first_of(" ="));
    EXPECT_TRUE(contains(both.output, "okapi: note: " + name + " ignored: ")) << both.output;
  }
  const CommandResult ngl = run_cli(kGreedy + "-ngl 99 -ngl 0");
  EXPECT_TRUE(contains(ngl.output, "okapi: note: -ngl ignored: okapi runs on the CPU\n")) << ngl.output;
  EXPECT_EQ(ngl.output.find("note: -ngl"), ngl.output.rfind("note: -ngl")) << "one note a flag: " << ngl.output;
  EXPECT_TRUE(contains(run_cli(kGreedy + "-fa").output, "okapi: note: -fa ignored: okapi's attention is always tiled"));
  // -fa is not -f a (a prompt file 'a'), -ngl not -n gl.
  EXPECT_FALSE(contains(run_cli(kGreedy + "-fa").output, "prompt file"));
}

TEST(LlamaHabits, EveryModelVerbAcceptsThem) {
  for (const std::string verb : {"run", "chat", "serve", "bench", "perplexity", "logits"}) {
    SCOPED_TRACE(verb);
    const CommandResult r = run_cli(verb + " -ngl 99 -fa on --help");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "okapi: note: -ngl ignored: okapi runs on the CPU")) << r.output;
    EXPECT_TRUE(contains(r.output, "okapi: note: -fa ignored")) << r.output;
  }
  const CommandResult bench = run_cli("bench -m " + kModel + " -p 4 -n 0 -r 1 -t 1 -ngl 99 -fa 1 -o jsonl");
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  const CommandResult chat = run_cli("chat -cnv -i --help");
  EXPECT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_TRUE(contains(chat.output, "okapi: note: -cnv ignored: okapi chat always converses")) << chat.output;
}

TEST(LlamaHabits, BadValuesAreUsageErrors) {
  const std::string run = "run -m " + kModel + " ";
  expect_usage_error(run + "-ngl", "-ngl needs a value (a layer count, auto or all)");
  expect_usage_error(run + "-ngl -p hi", "-ngl needs a value");
  expect_usage_error(run + "-ngl many", "-ngl: 'many' is not a layer count, auto or all");
  expect_usage_error(run + "--flash-attn=maybe", "--flash-attn: 'maybe' is not on, off or auto");
  expect_usage_error(run + "--no-conversation=1", "--no-conversation takes no value");
}

TEST(LlamaHabits, ConversationFlagsPointAtChat) {
  const std::string run = "run -m " + kModel + " -p hi ";
  expect_usage_error(run + "-cnv", "okapi: error: -cnv: okapi run does not converse; use `okapi chat -m MODEL`");
  expect_usage_error(run + "--conversation", "--conversation: okapi run does not converse; use `okapi chat");
  expect_usage_error(run + "-i", "-i: okapi run is not interactive; use `okapi chat -m MODEL`");
  expect_usage_error(run + "--interactive", "okapi chat");
  expect_usage_error("chat -no-cnv", "-no-cnv: okapi chat always converses; use `okapi run");
}

// llama.cpp's -e: \n \r \t \' \" \\ \xHH, anything else kept; without -e okapi keeps the prompt as given.
TEST(LlamaHabits, EscapeProcessesThePromptAsLlamaCppDoes) {
  const auto prompt_of = [](const std::string& flags) {
    const CommandResult r = stdout_of("run -m " + kModel + " -n 1 --temp 0 -t 1 --json " + flags);
    EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output)["prompt"].get<std::string>() : std::string();
  };
  const std::string raw = R"(One\ntwo\tthree \"q\" \'s\' a\\b \x41\x7a \q \x4 end\)";
  EXPECT_EQ(prompt_of("-e -p " + test::shell_quote(raw)), "One\ntwo\tthree \"q\" 's' a\\b Az \\q \\x4 end\\");
  EXPECT_EQ(prompt_of("--escape -p " + test::shell_quote("a\\rb")), "a\rb");
  EXPECT_EQ(prompt_of("-p " + test::shell_quote(raw)), raw);
  EXPECT_EQ(prompt_of("-e --no-escape -p " + test::shell_quote(raw)), raw);
  const fs::path dir = test::make_temp_dir("llama-habits");
  const fs::path file = dir / "prompt.txt";
  { std::ofstream(file) << "Once\\nupon"; }
  EXPECT_EQ(prompt_of("-e -f " + file.string()), "Once\nupon");  // as llama.cpp: the file's text too
  fs::remove_all(dir);
}

// llama-bench -pg PP,TG: one test of a PP-token prompt then TG decoded tokens, "ppPP+tgTG",
// (PP + TG) tokens over the time of both.
TEST(LlamaHabits, BenchPromptThenGeneration) {
  const std::string base = "bench -m " + kModel + " -r 1 -t 1 ";
  const CommandResult r = stdout_of(base + "-p 0 -n 0 -pg 8,4 -pg 16,2 -o jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> rows = lines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  const auto first = nlohmann::json::parse(rows[0]);
  EXPECT_EQ(first["test"], "pp8+tg4");
  EXPECT_EQ(first["n_prompt"], 8);
  EXPECT_EQ(first["n_gen"], 4);
  EXPECT_GT(first["avg_ts"].get<double>(), 0.0);
  // avg_ns is the time of one run: (8 + 4) tokens at avg_ts tokens a second.
  EXPECT_NEAR(first["avg_ns"].get<double>(), 1e9 * 12 / first["avg_ts"].get<double>(), 2.0);
  EXPECT_EQ(nlohmann::json::parse(rows[1])["test"], "pp16+tg2");

  const CommandResult md = stdout_of(base + "-p 8 -n 4 -pg 8,4 -d 0,8");
  ASSERT_EQ(md.exit_code, 0) << md.output;
  std::vector<std::string> tests;
  for (const std::string& line : lines(md.output)) {
    const size_t end = line.rfind(" | ");
    const size_t start = end == std::string::npos ? end : line.rfind("| ", end - 1);
    if (start != std::string::npos && line.rfind("| stories", 0) == 0) tests.push_back(line.substr(start + 2, end - start - 2));
  }
  EXPECT_EQ(tests, (std::vector<std::string>{"pp8", "tg4", "pp8+tg4", "pp8 @ d8", "tg4 @ d8", "pp8+tg4 @ d8"}))
      << md.output;
  // A pair with one zero is the plain test (as llama-bench names it); 0,0 runs nothing.
  const CommandResult tg = stdout_of(base + "-p 0 -n 0 -pg 0,4 -pg 0,0 -o jsonl");
  ASSERT_EQ(lines(tg.output).size(), 1u) << tg.output;
  EXPECT_EQ(nlohmann::json::parse(tg.output)["test"], "tg4");

  for (const std::string bad : {"8", "8,4,2", "a,4", "8,", ",4", "8,2147483648", "1.5,2", ""}) {
    expect_usage_error(base + "-pg '" + bad + "'", "is not PP,TG");
  }
  expect_usage_error(base + "-pg", "-pg");
  expect_usage_error(base + "-p 0 -n 0 -pg 0,0", "no tests");
}

TEST(LlamaHabits, SynthPresetAndTypeAreUsageErrors) {
  expect_usage_error("synth --preset nope -o x.gguf", "--preset: unknown preset 'nope'; valid presets: ");
  expect_usage_error("synth --preset stories15M --type Q9_Z -o x.gguf", "--type");
  expect_usage_error("synth --preset stories15M --arch no-such-arch -o x.gguf",
                     "--arch: preset 'stories15M' cannot be written as architecture 'no-such-arch'");
}

TEST(LlamaHabits, InspectTakesTheModelAsMToo) {
  const CommandResult positional = run_cli("inspect " + kModel);
  ASSERT_EQ(positional.exit_code, 0) << positional.output;
  const CommandResult flag = run_cli("inspect -m " + kModel);
  EXPECT_EQ(flag.exit_code, 0) << flag.output;
  EXPECT_EQ(flag.output, positional.output);
  EXPECT_EQ(run_cli("inspect --model " + kModel + " --json").exit_code, 0);
  expect_usage_error("inspect", "inspect: a file is required");
  expect_usage_error("inspect -m " + kModel + " " + kModel, "inspect: ");
}

}  // namespace
}  // namespace okapi
