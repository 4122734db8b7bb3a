// Pipeline-parallel inference (runtime/pipeline.hpp): `mpirun -np 2 okapi VERB --pipeline` gives
// the same bits as one process (perplexity's saved log-probs byte for byte, run's greedy text and
// tokens), in float and exact mode, and each rank holds about its share of the weights. The stage
// planner and micro-batch sizes are checked without MPI.
//
// The MPI tests need Open MPI (okapi built with it, mpirun on PATH) and ../shared's models: absent,
// they skip, or fail under OKAPI_REQUIRE_GOLDEN. mpirun runs as root in CI, so the test sets
// OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM). Under ASan (OKAPI_SANITIZED) Open MPI's own allocations leak
// at exit, so the ranks run with ASAN_OPTIONS=detect_leaks=0; the memory bound is not checked there
// (an ASan binary's RSS is mostly its shadow and code) and the runs are shorter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/shared_dir.hpp"
#include "dist/communicator.hpp"
#include "runtime/pipeline.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi::runtime {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::shell_quote;

// ---- the stage planner and micro-batches (no MPI) ----

TEST(PipelinePlan, EqualLayersSplitEvenly) {
  const std::vector<uint64_t> layers(6, 10);
  EXPECT_EQ(plan_stages(layers, 0, 2), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(plan_stages(layers, 0, 3), (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(plan_stages(layers, 0, 1), (std::vector<int64_t>{0, 6}));
}

TEST(PipelinePlan, TheLastStageCountsTheHead) {
  // Six layers of 10 and a head of 25: [0, 4) and [4, 6) + head cost 40 and 45; any other split has
  // a stage of 50 or more.
  const std::vector<uint64_t> layers(6, 10);
  EXPECT_EQ(plan_stages(layers, 25, 2), (std::vector<int64_t>{0, 4, 6}));
  // A head larger than all the layers still leaves the last stage one layer.
  EXPECT_EQ(plan_stages(layers, 1000, 2), (std::vector<int64_t>{0, 5, 6}));
}

TEST(PipelinePlan, UnevenLayersMinimizeTheLargestStage) {
  const std::vector<uint64_t> layers{50, 10, 10, 10, 10, 10};
  EXPECT_EQ(plan_stages(layers, 0, 2), (std::vector<int64_t>{0, 1, 6}));
}

TEST(PipelinePlan, MoreRanksThanLayersIsAnError) {
  const std::vector<uint64_t> layers(2, 10);
  try {
    (void)plan_stages(layers, 0, 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 ranks but the model has 2 layers"), std::string::npos) << e.what();
  }
}

TEST(PipelinePlan, MicroBatchesAreAboutFourPerStage) {
  EXPECT_EQ(micro_batch_tokens(512, 2), 64);
  EXPECT_EQ(micro_batch_tokens(513, 2), 65);
  EXPECT_EQ(micro_batch_tokens(128, 4), 16);
  EXPECT_EQ(micro_batch_tokens(40, 2), 16);  // the floor
  EXPECT_EQ(micro_batch_tokens(1, 2), 16);
}

// ---- the verbs under mpirun ----

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir) / name;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return {};
}

fs::path ts5m() { return okapi::shared_dir() / "models" / "zoo" / "okapi-ts5M-hd64.gguf"; }
fs::path stories_text() { return okapi::shared_dir() / "text" / "tinystories-valid-head.txt"; }

class Pipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    mpirun_ = find_on_path("mpirun");
    if (!dist::built_with_mpi() || mpirun_.empty()) {
      const std::string why = !dist::built_with_mpi() ? "okapi was built without MPI" : "mpirun is not on PATH";
      if (test::golden_required()) GTEST_FAIL() << "OKAPI_REQUIRE_GOLDEN: " << why;
      GTEST_SKIP() << why;
    }
    OKAPI_REQUIRE_DATA(ts5m());
    OKAPI_REQUIRE_DATA(stories_text());
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    if (test::sanitized_run()) ::setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    dir_ = test::make_temp_dir("pipeline");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // `mpirun -np N [wrapper] okapi ARGS` with ARGS' stderr into dir_/NAME.err (so stdout is the
  // verb's own output).
  CommandResult mpi_okapi(int np, const std::string& args, const std::string& name, const std::string& wrapper = "") {
    std::string command = mpirun_ + " --oversubscribe -np " + std::to_string(np) +
                          " -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM";
    if (test::sanitized_run()) command += " -x ASAN_OPTIONS";
    command += " " + wrapper + shell_quote(test::cli_path().string()) + " " + args;
    return test::run_command("(" + command + " 2>" + shell_quote((dir_ / (name + ".err")).string()) + ")");
  }
  CommandResult one_process(const std::string& args, const std::string& name) {
    // Built up with += (gcc 12's -Wrestrict misfires on a "(" + ... chain here).
    std::string command = "(";
    command += shell_quote(test::cli_path().string());
    command += " " + args + " 2>" + shell_quote((dir_ / (name + ".err")).string()) + ")";
    return test::run_command(command);
  }
  std::string err(const std::string& name) const { return test::read_file(dir_ / (name + ".err")); }

  // Perplexity's saved log-probs, one process and two ranks, must be the same bytes.
  void expect_same_perplexity(const std::string& mode) {
    const int64_t chunks = test::sanitized_run() ? 1 : 3;
    const std::string common = "perplexity -m " + shell_quote(ts5m().string()) + " -f " +
                               shell_quote(stories_text().string()) + " -c 128 -b 128 -t 1 --chunks " +
                               std::to_string(chunks) + " " + mode + " --save-logits ";
    const fs::path one = dir_ / "one.logits", two = dir_ / "two.logits";
    const CommandResult single = one_process(common + shell_quote(one.string()), "one");
    ASSERT_EQ(single.exit_code, 0) << single.output << err("one");
    const CommandResult piped = mpi_okapi(2, common + shell_quote(two.string()) + " --pipeline", "two");
    ASSERT_EQ(piped.exit_code, 0) << piped.output << err("two");
    const std::string a = test::read_file(one), b = test::read_file(two);
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "the saved log-probs differ (" << a.size() << " and " << b.size() << " bytes)";
    // The printed result too (rank 0 prints it, once).
    EXPECT_EQ(single.output, piped.output);
    EXPECT_NE(piped.output.find("PPL"), std::string::npos) << piped.output;
  }

  // run's greedy text and tokens, one process and two ranks.
  void expect_same_run(const std::string& mode) {
    // A prompt of ~100 tokens: prefill runs as several micro-batches.
    const std::string prompt =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
        "friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. Her friend "
        "Tom came and said";
    const int n = test::sanitized_run() ? 8 : 40;
    const std::string args = "run -m " + shell_quote(ts5m().string()) + " -p " + shell_quote(prompt) + " -n " +
                             std::to_string(n) + " --temp 0 -c 256 -t 1 --json " + mode;
    const CommandResult single = one_process(args, "one");
    ASSERT_EQ(single.exit_code, 0) << single.output << err("one");
    const CommandResult piped = mpi_okapi(2, args + " --pipeline", "two");
    ASSERT_EQ(piped.exit_code, 0) << piped.output << err("two");
    const auto a = nlohmann::json::parse(single.output), b = nlohmann::json::parse(piped.output);
    EXPECT_EQ(a.at("tokens"), b.at("tokens"));
    EXPECT_EQ(a.at("text"), b.at("text"));
    EXPECT_EQ(a.at("tokens").size(), static_cast<size_t>(n));
  }

  std::string mpirun_;
  fs::path dir_;
};

TEST_F(Pipeline, PerplexityFloatIsBitIdenticalToOneProcess) { expect_same_perplexity(""); }
TEST_F(Pipeline, PerplexityExactIsBitIdenticalToOneProcess) { expect_same_perplexity("--exact"); }
TEST_F(Pipeline, RunGreedyFloatGivesTheSameText) { expect_same_run(""); }
TEST_F(Pipeline, RunGreedyExactGivesTheSameText) { expect_same_run("--exact"); }

TEST_F(Pipeline, MoreRanksThanLayersFailsTheJob) {
  const fs::path five_layers = test::repo_dir() / "models" / "stories260K.gguf";
  const CommandResult r = mpi_okapi(6, "run -m " + shell_quote(five_layers.string()) + " -p hi -n 2 -t 1 --pipeline", "six");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(err("six").find("6 ranks but the model has 5 layers"), std::string::npos) << r.output << err("six");
}

TEST_F(Pipeline, AnArchitectureWithoutStagesIsNamed) {
  const fs::path gemma3 = okapi::shared_dir() / "golden" / "ik" / "public" / "models" / "golden-gemma3-F32.gguf";
  OKAPI_REQUIRE_DATA(gemma3);
  const CommandResult r = mpi_okapi(2, "run -m " + shell_quote(gemma3.string()) + " -p hi -n 2 -t 1 --pipeline", "gemma");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(err("gemma").find("the gemma3 architecture cannot run a part of its layers"), std::string::npos)
      << err("gemma");
}

// BitNet's ternary layers (its own sub-norms, another backend path) through the same stage hooks.
TEST_F(Pipeline, BitnetPerplexityIsBitIdentical) {
  const fs::path bitnet = okapi::shared_dir() / "golden" / "public" / "models" / "golden-bitnet-F32.gguf";
  OKAPI_REQUIRE_DATA(bitnet);
  const std::string common = "perplexity -m " + shell_quote(bitnet.string()) + " -f " +
                             shell_quote((test::repo_dir() / "examples" / "story.txt").string()) +
                             " -c 64 -t 1 --chunks 2 --save-logits ";
  const fs::path one = dir_ / "one.logits", two = dir_ / "two.logits";
  ASSERT_EQ(one_process(common + shell_quote(one.string()), "one").exit_code, 0) << err("one");
  ASSERT_EQ(mpi_okapi(2, common + shell_quote(two.string()) + " --pipeline", "two").exit_code, 0) << err("two");
  const std::string a = test::read_file(one), b = test::read_file(two);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the saved log-probs differ";
}

TEST_F(Pipeline, LayerSkipDraftingIsRefused) {
  const CommandResult r = one_process("run -m " + shell_quote(ts5m().string()) + " -p hi -n 2 --draft-skip 1 --pipeline", "skip");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(err("skip").find("--draft-skip"), std::string::npos) << err("skip");
}

// Each rank maps the whole file but repacks and reads only its stage: its peak RSS, less what the
// same run of a 1 MB model takes (code, MPI, the verb's buffers), stays well under one process's.
// A synthetic model large enough for the weights to dominate: stories110M's shapes in Q8_0
// (~140 MB; its 26 MB LM head goes to the last rank, whose peak includes repacking it).
TEST_F(Pipeline, EachRankHoldsAboutItsShareOfTheWeights) {
  if (test::sanitized_run()) GTEST_SKIP() << "ASan's shadow and code dominate RSS; the Release run checks this";
  const fs::path model = dir_ / "s110m.gguf";
  const CommandResult synth =
      one_process("synth --preset stories110M --type Q8_0 --seed 1 -o " + shell_quote(model.string()), "synth");
  ASSERT_EQ(synth.exit_code, 0) << synth.output << err("synth");
  const std::string rss = std::string(OKAPI_RANK_RSS_PATH);
  const auto peak_kb = [](const fs::path& dir, int rank) {
    std::ifstream in(dir / ("rank" + std::to_string(rank)));
    int64_t kb = 0;
    in >> kb;
    return kb;
  };
  // Peak RSS per rank of `model`: one process, or two ranks with --pipeline.
  const auto measure = [&](const fs::path& file, bool pipelined, const std::string& name) {
    const fs::path out = dir_ / name;
    fs::create_directories(out);
    const std::string run = "perplexity -m " + shell_quote(file.string()) + " -f " + shell_quote(stories_text().string()) +
                            " -c 64 -b 64 -t 1 --chunks 1";
    const std::string wrapper = shell_quote(rss) + " " + shell_quote(out.string()) + " ";
    const CommandResult r = pipelined ? mpi_okapi(2, run + " --pipeline", name, wrapper)
                                      : test::run_command("(" + wrapper + shell_quote(test::cli_path().string()) + " " +
                                                          run + " 2>/dev/null)");
    EXPECT_EQ(r.exit_code, 0) << r.output << err(name);
    return std::vector<int64_t>{peak_kb(out, 0), pipelined ? peak_kb(out, 1) : 0};
  };
  // What a process takes besides the weights (code, MPI, buffers): the same runs of a 1 MB model.
  const fs::path tiny = test::repo_dir() / "models" / "stories260K.gguf";
  const std::vector<int64_t> one = measure(model, false, "one"), two = measure(model, true, "two");
  const std::vector<int64_t> one_base = measure(tiny, false, "one_base"), two_base = measure(tiny, true, "two_base");
  const int64_t one_work = one[0] - one_base[0];
  const auto file_kb = static_cast<int64_t>(fs::file_size(model) / 1024);
  std::printf("file %lld KiB; peak RSS (KiB) of this model / of stories260K: one process %lld / %lld, rank 0 %lld / "
              "%lld, rank 1 %lld / %lld\n",
              static_cast<long long>(file_kb), static_cast<long long>(one[0]), static_cast<long long>(one_base[0]),
              static_cast<long long>(two[0]), static_cast<long long>(two_base[0]), static_cast<long long>(two[1]),
              static_cast<long long>(two_base[1]));
  ASSERT_GT(one_work, file_kb / 2) << "one process should hold the weights";
  for (int rank = 0; rank < 2; ++rank) {
    const int64_t work = two[static_cast<size_t>(rank)] - two_base[static_cast<size_t>(rank)];
    EXPECT_LT(work, one_work * 3 / 4) << "rank " << rank << " holds more than its share";
  }
}

// One completion through `okapi serve --pipeline` on two ranks, the same text as one process's
// server. HTTP through bash's /dev/tcp, so the test needs no client library.
TEST_F(Pipeline, ServeCompletionMatchesOneProcess) {
  // $1: the server command (its stderr to $2); prints the raw HTTP response of one completion.
  const std::string script = R"(
set -u
"$@" 2>"$ERR" &
server=$!
port=""
for _ in $(seq 1 300); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$ERR" | grep -o '[0-9]*$' | head -1)
  if [ -n "$port" ] && exec 3<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
    printf 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
    if head -1 <&3 | grep -q ' 200'; then exec 3<&-; break; fi
    exec 3<&-
  fi
  sleep 0.2
done
body='{"prompt": "Once upon a time, there was a little girl", "max_tokens": 24, "temperature": 0}'
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "${#body}" "$body" >&3
cat <&3
exec 3<&-
kill "$server"
wait "$server" 2>/dev/null
exit 0
)";
  const fs::path script_file = dir_ / "serve.sh";
  std::ofstream(script_file) << script;
  const std::string serve = shell_quote(test::cli_path().string()) + " serve -m " + shell_quote(ts5m().string()) +
                            " --host 127.0.0.1 --port 0 -t 1 -c 256";
  const auto completion_text = [](const std::string& response) {
    // The body's JSON object (the server may send it in one HTTP chunk, between size lines).
    const size_t headers = response.find("\r\n\r\n");
    const size_t first = response.find('{', headers == std::string::npos ? 0 : headers), last = response.rfind('}');
    if (headers == std::string::npos || first == std::string::npos || last == std::string::npos || last < first)
      return "<no HTTP response: " + response + ">";
    return nlohmann::json::parse(response.substr(first, last - first + 1)).at("choices").at(0).at("text").get<std::string>();
  };
  const CommandResult single = test::run_command("ERR=" + shell_quote((dir_ / "one.err").string()) + " bash " +
                                                 shell_quote(script_file.string()) + " " + serve);
  const std::string mpi = mpirun_ + " --oversubscribe -np 2 -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM" +
                          (test::sanitized_run() ? " -x ASAN_OPTIONS " : " ");
  const CommandResult piped = test::run_command("ERR=" + shell_quote((dir_ / "two.err").string()) + " bash " +
                                                shell_quote(script_file.string()) + " " + mpi + serve + " --pipeline");
  const std::string a = completion_text(single.output), b = completion_text(piped.output);
  EXPECT_FALSE(a.empty()) << single.output << err("one");
  EXPECT_EQ(a, b) << piped.output << err("two");
}

TEST(PipelineWithoutMpirun, OneProcessOrTheMissingMpiError) {
  OKAPI_REQUIRE_DATA(ts5m());
  const std::string args = "run -m " + shell_quote(ts5m().string()) + " -p 'Once upon' -n 6 --temp 0 -t 1 --json";
  const CommandResult piped = test::run_cli(args + " --pipeline 2>&1");
  if (!dist::built_with_mpi()) {
    EXPECT_NE(piped.exit_code, 0);
    EXPECT_NE(piped.output.find("built without MPI"), std::string::npos) << piped.output;
    return;
  }
  // With MPI but no mpirun: a job of one rank, the whole model in this process.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  // MPI started in-process (a job of one) leaks at exit, as under mpirun: no leak check then.
  const std::string no_leak_check = test::sanitized_run() ? "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 " : "";
  const std::string okapi_args = shell_quote(test::cli_path().string()) + " " + args;
  const CommandResult plain = test::run_command("(" + okapi_args + " 2>/dev/null)");
  const CommandResult piped_quiet = test::run_command("(" + no_leak_check + okapi_args + " --pipeline 2>/dev/null)");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(piped_quiet.exit_code, 0) << piped.output;
  EXPECT_EQ(nlohmann::json::parse(plain.output).at("tokens"), nlohmann::json::parse(piped_quiet.output).at("tokens"));
}

}  // namespace
}  // namespace okapi::runtime
