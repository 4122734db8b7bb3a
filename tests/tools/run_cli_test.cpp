// okapi run / perplexity / bench as a user runs them: the greedy story byte for byte, the default
// model, JSON output, clear errors with non-zero exits, and Ctrl-C stopping cleanly with timings.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;
using test::run_cli;
using test::run_command;

const std::string kModel = (test::repo_dir() / "models" / "stories260K.gguf").string();

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using test::read_file;

std::string cli() { return test::cli_path().string(); }

// Only the stdout of `okapi ARGS` (run_command folds stderr in; the subshell drops it first).
test::CommandResult stdout_of(const std::string& args) { return run_command("( " + cli() + args + " 2>/dev/null )"); }

TEST(RunCli, GreedyStoryIsByteExact) {
  const std::string expected = read_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  const auto r = stdout_of(" run -m " + kModel + " -p 'Once upon a time' --temp 0 -n 200 -c 512 -t 1 --no-display-prompt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, expected);
}

TEST(RunCli, GreedyStoryMatchesSharedGolden) {
  OKAPI_REQUIRE_SHARED();
  const auto golden = shared_dir() / "golden/public";
  const auto r = stdout_of(" run -m " + (golden / "models/stories260K.gguf").string() +
                           " -p 'Once upon a time' --temp 0 -n 200 -c 512 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "Once upon a time" + read_file(golden / "greedy/stories260K-once-upon-a-time.txt"));
}

TEST(RunCli, NoArgumentsPrintsAStoryAndTimings) {
  const auto r = run_cli("run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Once upon a time")) << r.output;
  EXPECT_GT(r.output.size(), 200u);
  EXPECT_TRUE(contains(r.output, "prompt")) << r.output;
  EXPECT_TRUE(contains(r.output, "tok/s")) << r.output;
  EXPECT_TRUE(contains(r.output, "load")) << r.output;
}

TEST(RunCli, JsonRecord) {
  const auto r = stdout_of(" run -m " + kModel + " -p 'Once upon a time' --temp 0 -n 20 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["tokens"].size(), 20u);
  EXPECT_EQ(j["text"].get<std::string>().rfind(", there was a little girl named Lily.", 0), 0u) << j["text"];
  EXPECT_GT(j["generation_tokens_per_second"].get<double>(), 0.0);
  EXPECT_EQ(j["prompt_tokens"].size(), 5u);
}

TEST(RunCli, SeedMakesSamplingDeterministic) {
  const std::string args = " run -m " + kModel + " -n 40 --seed 7 --temp 1.0";
  const auto a = stdout_of(args);
  const auto b = stdout_of(args);
  ASSERT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.output, b.output);
}

TEST(RunCli, ErrorsAreClearAndNonZero) {
  const auto bad_flag = run_cli("run --no-such-flag");
  EXPECT_NE(bad_flag.exit_code, 0);
  const auto missing = run_cli("run -m /nonexistent/model.gguf -p hi");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(contains(missing.output, "/nonexistent/model.gguf")) << missing.output;
  const auto too_long = run_cli("run -m " + kModel + " -c 4 -p 'Once upon a time there was a dog'");
  EXPECT_NE(too_long.exit_code, 0);
  EXPECT_TRUE(contains(too_long.output, "context")) << too_long.output;
  const auto bad_cache = run_cli("run -m " + kModel + " -ctk q3");
  EXPECT_NE(bad_cache.exit_code, 0);
  const auto bad_threads = run_cli("run -m " + kModel + " -t 0");
  EXPECT_NE(bad_threads.exit_code, 0);
  EXPECT_TRUE(contains(bad_threads.output, "-t")) << bad_threads.output;
  const auto bad_number = run_cli("run -m " + kModel + " -n lots");
  EXPECT_NE(bad_number.exit_code, 0);
  const auto ppl_missing = run_cli("perplexity -m " + kModel + " -f /nonexistent/text.txt");
  EXPECT_NE(ppl_missing.exit_code, 0);
  EXPECT_TRUE(contains(ppl_missing.output, "/nonexistent/text.txt")) << ppl_missing.output;
}

TEST(RunCli, CtrlCStopsAndPrintsTimings) {
  const auto dir = test::make_temp_dir("run-sigint");
  const std::string log = (dir / "out.txt").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string exe = cli();
    execl(exe.c_str(), exe.c_str(), "run", "-m", kModel.c_str(), "-n", "-1", "-c", "60000", "--ignore-eos",
          "--temp", "0", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until text is streaming, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (read_file(log).size() < 100 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string out = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal instead of exiting cleanly\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_TRUE(contains(out, "interrupted")) << out;
  EXPECT_TRUE(contains(out, "tok/s")) << out;
  fs::remove_all(dir);
}

TEST(PerplexityCli, PrintsRunningAndFinalValues) {
  OKAPI_REQUIRE_SHARED();
  const auto golden = shared_dir() / "golden/public";
  const auto r = run_cli("perplexity -m " + (golden / "models/stories260K.gguf").string() + " -f " +
                         (golden / "ppl/tinystories_valid_excerpt.txt").string() + " -c 128 -b 128 --chunks 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // llama-perplexity printed [1]3.5356,[2]4.0840,[3]4.0440 for these chunks.
  EXPECT_TRUE(contains(r.output, "[1]3.535")) << r.output;
  EXPECT_TRUE(contains(r.output, "[3]4.04")) << r.output;
  EXPECT_TRUE(contains(r.output, "Final estimate: PPL = 4.04")) << r.output;
}

TEST(PerplexityCli, KlDivergenceAgainstItself) {
  OKAPI_REQUIRE_SHARED();
  const auto dir = test::make_temp_dir("ppl-cli");
  const auto golden = shared_dir() / "golden/public";
  const std::string base = "perplexity -m " + (golden / "models/stories260K.gguf").string() + " -f " +
                           (golden / "ppl/tinystories_valid_excerpt.txt").string() + " -c 64 --chunks 4";
  const std::string file = (dir / "base.bin").string();
  ASSERT_EQ(run_cli(base + " --save-logits " + file).exit_code, 0);
  const auto r = run_cli(base + " -ctk f32 -ctv f32 --kl-divergence " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Mean    KLD:")) << r.output;
  EXPECT_TRUE(contains(r.output, "Same top p:")) << r.output;
  fs::remove_all(dir);
}

TEST(BenchCli, PrintsMarkdownTable) {
  const auto r = run_cli("bench -m " + kModel + " -p 16 -n 8 -t 1,2 -r 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| model | size | params | backend | threads | type_k | type_v | test | t/s |"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "| f16 | f16 | pp16 |")) << "llama-bench's default cache: " << r.output;
  EXPECT_TRUE(contains(r.output, "| pp16 |")) << r.output;
  EXPECT_TRUE(contains(r.output, "| tg8 |")) << r.output;
  const auto json = stdout_of(" bench -m " + kModel + " -p 16 -n 0 -r 1 --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_GT(nlohmann::json::parse(json.output)["avg_ts"].get<double>(), 0.0);
  EXPECT_EQ(nlohmann::json::parse(json.output)["type_k"], "f16");
  const auto f32 = stdout_of(" bench -m " + kModel + " -p 0 -n 4 -r 1 -ctk f32 -ctv f32 --json");
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  EXPECT_EQ(nlohmann::json::parse(f32.output)["type_v"], "f32");
}

// Constrained output: the text follows the grammar or the schema, and a bad grammar or schema is
// an error naming the flag and where, before the model is loaded.
TEST(RunCli, GrammarAndJsonSchemaConstrainTheText) {
  const auto g = stdout_of(" run -m " + kModel + " -p Answer -n 40 --seed 3 --no-display-prompt --grammar " +
                           "'root ::= (\"yes\" | \"no\") \", \" [0-9]{2}'");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_TRUE(std::regex_match(g.output, std::regex("(yes|no), [0-9]{2}"))) << g.output;
  const auto dir = test::make_temp_dir("okapi-run-schema");
  const fs::path schema = dir / "person.json";
  std::ofstream(schema) << R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 1, "maximum": 99},
                               "ok": {"type": "boolean"}}, "required": ["age", "ok"], "additionalProperties": false})";
  for (int seed : {1, 2, 3}) {
    const auto j = stdout_of(" run -m " + kModel + " -p Once -n 200 --no-display-prompt --seed " + std::to_string(seed) +
                             " --json-schema-file " + schema.string());
    ASSERT_EQ(j.exit_code, 0) << j.output;
    const auto value = nlohmann::json::parse(j.output);
    EXPECT_EQ(value.size(), 2u) << j.output;
    EXPECT_TRUE(value["ok"].is_boolean()) << j.output;
    EXPECT_GE(value["age"].get<int>(), 1);
    EXPECT_LE(value["age"].get<int>(), 99);
  }
  fs::remove_all(dir);
}

TEST(RunCli, BadGrammarsAndSchemasAreErrors) {
  const auto unparsable = run_cli(" run -m /nonexistent.gguf --grammar 'root ::= \"a\"\nitem ::= ( \"b\"'");
  EXPECT_EQ(unparsable.exit_code, 1) << unparsable.output;
  EXPECT_TRUE(contains(unparsable.output, "okapi: error: --grammar: grammar, line 2, column")) << unparsable.output;
  const auto endless = run_cli(" run --grammar 'root ::= \"a\" root'");
  EXPECT_EQ(endless.exit_code, 1);
  EXPECT_TRUE(contains(endless.output, "can never end")) << endless.output;
  const auto schema = run_cli(" run --json-schema '{\"type\": \"string\", \"pattern\": \"(?=a)\"}'");
  EXPECT_EQ(schema.exit_code, 1);
  EXPECT_TRUE(contains(schema.output, "--json-schema:") && contains(schema.output, "pattern")) << schema.output;
  const auto not_json = run_cli(" run --json-schema '{nope'");
  EXPECT_EQ(not_json.exit_code, 1);
  EXPECT_TRUE(contains(not_json.output, "--json-schema: not valid JSON")) << not_json.output;
  const auto both = run_cli(" run --grammar 'root ::= \"a\"' --json-schema '{}'");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  const auto missing = run_cli(" run --grammar-file /nonexistent/g.gbnf");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(contains(missing.output, "/nonexistent/g.gbnf")) << missing.output;
}

}  // namespace
}  // namespace okapi
