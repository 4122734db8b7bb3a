// okapi embed as a user runs it, and against llama-embedding (../shared/peers) on tiny synth
// models (2 layers, F32 weights): bert and nomic-bert with the bge WordPiece vocabulary, a
// Qwen3-Embedding shape (last-token pooling, f16 KV on both sides) and a bert reranker (rank
// pooling). The same tokens, each vector within cosine 0.99999 of llama.cpp's, the same
// similarity matrix within 1e-4; the output formats; clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/shared_dir.hpp"
#include "runtime/embedder.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "synth/synth.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;
using test::run_command;
using test::shell_quote;

bool sanitized() {
  const char* v = std::getenv("OKAPI_SANITIZED");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

fs::path bge_vocab() { return shared_dir() / "vocab" / "ggml-vocab-bert-bge.gguf"; }
fs::path peer_embedding() { return shared_dir() / "peers" / "llama-embedding"; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const std::vector<std::string> kSentences = {
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaped over a sleepy hound!",
    "Embeddings map text to vectors; similar texts get similar vectors.",
    "Über café naïve résumé — unicode, too.",
};

class EmbedCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new fs::path(test::make_temp_dir("embed-cli")); }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  // A 2-layer tiny model of `preset` (test::tiny_preset) with the vocabulary of `vocab` (empty:
  // synth's own), written once per suite.
  static fs::path model(const std::string& preset, const fs::path& vocab) {
    const fs::path path = *dir_ / (preset + ".gguf");
    if (fs::exists(path)) return path;
    synth::SynthOptions options;
    options.type = "F32";
    options.layers = 2;
    options.vocab_from = vocab;
    options.n_threads = 2;
    synth::write_synth(test::tiny_preset(preset), options, path);
    return path;
  }
  static fs::path bert() { return model("bge-base-en-v1.5", bge_vocab()); }

  static fs::path write(const std::string& name, const std::string& bytes) {
    const fs::path path = *dir_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  static fs::path sentences_file(size_t n) {
    std::string text;
    for (size_t i = 0; i < n && i < kSentences.size(); ++i) text += kSentences[i] + "\n";
    return write("sentences-" + std::to_string(n) + ".txt", text);
  }

  static fs::path* dir_;
};
fs::path* EmbedCli::dir_ = nullptr;

// Only stdout of a command (stderr dropped).
test::CommandResult stdout_of(const std::string& command) { return run_command("( " + command + " 2>/dev/null )"); }

// stdout of a command, its stderr written to `log` (braces: run_command's trailing 2>&1 then
// applies to the group, whose stderr is already redirected).
test::CommandResult stdout_logging(const std::string& command, const fs::path& log) {
  return run_command("{ " + command + " 2>" + shell_quote(log.string()) + "; }");
}

std::string okapi() { return shell_quote(test::cli_path().string()); }

// The vectors of llama-embedding's json output, or of its raw output (one vector a line).
std::vector<std::vector<float>> vectors_of(const std::string& output) {
  std::vector<std::vector<float>> out;
  const size_t begin = output.find('{'), end = output.rfind('}');
  if (begin == std::string::npos || end == std::string::npos) {
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      // Only lines of numbers (llama-embedding's --verbose-prompt lists tokens on stdout too).
      std::istringstream values(line);
      std::vector<float> v;
      for (float x; values >> x;) v.push_back(x);
      if (!v.empty() && values.eof()) out.push_back(std::move(v));
    }
    return out;
  }
  const auto json = nlohmann::json::parse(output.substr(begin, end - begin + 1), nullptr, false);
  if (json.is_discarded() || !json.contains("data")) return {};
  for (const auto& item : json["data"]) out.push_back(item["embedding"].get<std::vector<float>>());
  return out;
}

// "number of tokens in ... = N" lines of --verbose-prompt, both tools.
std::vector<int> token_counts(const std::string& log) {
  static const std::regex line("number of tokens in (?:prompt|input) = ([0-9]+)");
  std::vector<int> counts;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it)
    counts.push_back(std::stoi((*it)[1]));
  return counts;
}

struct Fidelity {
  std::string flags;       // given to both tools
  // Given to llama-embedding only. For encoders, -fa off: its flash attention (the default) rounds
  // K and V to f16 and sums V in f16, ~6e-5 away from the f32 values both compute without it.
  std::string peer_flags = "-fa off";
  std::string format = "json";
  double min_cosine = 0.99999;
  double max_similarity_error = 1e-4;  // between the two cosine-similarity matrices
  double max_score_error = 0;  // > 0: compare values directly (rank scores)
};

void expect_matches_llama(const fs::path& model, const fs::path& inputs, const Fidelity& f) {
  const std::string common = " -m " + shell_quote(model.string()) + " -f " + shell_quote(inputs.string()) +
                             " -t 2 --verbose-prompt --embd-output-format " + f.format + " " + f.flags;
  // stdout (the JSON) apart from stderr (the logs, --verbose-prompt's token counts).
  const fs::path log = model.parent_path() / "stderr.txt";
  // llama-embedding now and then loses the end of its stdout and stderr (its logger is leaked,
  // not flushed, at exit: llama.cpp issue 22142), more often on a loaded machine: a run whose
  // output does not parse or lists too few inputs is retried.
  size_t n_inputs = 0;
  {
    std::istringstream lines(test::read_file(inputs));
    for (std::string line; std::getline(lines, line);) n_inputs += line.empty() ? 0 : 1;
  }
  test::CommandResult peer;
  std::string peer_log;
  for (int attempt = 0; attempt < 10; ++attempt) {
    peer = stdout_logging(shell_quote(peer_embedding().string()) + common + " " + f.peer_flags, log);
    peer_log = test::read_file(log);
    ASSERT_EQ(peer.exit_code, 0) << peer.output << peer_log;
    const bool whole = !peer.output.empty() && peer.output.back() == '\n';  // not cut inside a number
    if (whole && !vectors_of(peer.output).empty() && token_counts(peer_log).size() == n_inputs) break;
  }
  const auto ours = stdout_logging(okapi() + " embed" + common, log);
  const std::string our_log = test::read_file(log);
  ASSERT_EQ(ours.exit_code, 0) << ours.output << our_log;
  EXPECT_EQ(token_counts(our_log), token_counts(peer_log)) << our_log;
  EXPECT_EQ(token_counts(our_log).size(), n_inputs) << our_log;
  const auto want = vectors_of(peer.output), got = vectors_of(ours.output);
  ASSERT_FALSE(want.empty()) << f.flags << " " << f.peer_flags << ": llama-embedding's stdout ends with "
                             << peer.output.substr(peer.output.size() - std::min<size_t>(peer.output.size(), 400))
                             << "\nits log ends with " << peer_log.substr(peer_log.size() - std::min<size_t>(peer_log.size(), 600));
  ASSERT_EQ(got.size(), want.size()) << ours.output;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    const std::vector<float>& a = got[i];
    const std::vector<float>& b = want[i];
    ASSERT_EQ(a.size(), b.size());
    if (f.max_score_error > 0) {
      for (size_t d = 0; d < a.size(); ++d) EXPECT_NEAR(a[d], b[d], f.max_score_error) << "value " << d;
    } else {
      float max_diff = 0;
      for (size_t d = 0; d < a.size(); ++d) max_diff = std::max(max_diff, std::abs(a[d] - b[d]));
      EXPECT_GE(runtime::cosine_similarity(a, b), f.min_cosine) << "largest difference " << max_diff;
    }
  }
  if (f.max_score_error > 0) return;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want.size(); ++j)
      EXPECT_NEAR(runtime::cosine_similarity(got[i], got[j]), runtime::cosine_similarity(want[i], want[j]),
                  f.max_similarity_error)
          << i << ", " << j;
}

TEST_F(EmbedCli, BertMatchesLlamaEmbedding) {
  OKAPI_REQUIRE_DATA(peer_embedding());
  OKAPI_REQUIRE_DATA(bge_vocab());
  expect_matches_llama(bert(), sentences_file(kSentences.size()), {});
  if (sanitized()) return;
  expect_matches_llama(bert(), sentences_file(kSentences.size()), {.flags = "--pooling cls"});
  expect_matches_llama(bert(), sentences_file(2), {.flags = "--pooling none"});
  // llama-embedding as it runs by default (flash attention: K, V and the V sums in f16).
  expect_matches_llama(bert(), sentences_file(kSentences.size()), {.flags = "", .peer_flags = "", .max_similarity_error = 1e-3});
}

TEST_F(EmbedCli, NomicBertMatchesLlamaEmbedding) {
  if (sanitized()) GTEST_SKIP() << "bert covers the sanitized run";
  OKAPI_REQUIRE_DATA(peer_embedding());
  OKAPI_REQUIRE_DATA(bge_vocab());
  expect_matches_llama(model("nomic-embed-text-v1.5", bge_vocab()), sentences_file(kSentences.size()), {});
}

// A causal model: f16 KV on both sides (the default of both), flash attention as llama.cpp's default.
TEST_F(EmbedCli, Qwen3EmbeddingMatchesLlamaEmbedding) {
  if (sanitized()) GTEST_SKIP() << "bert covers the sanitized run";
  OKAPI_REQUIRE_DATA(peer_embedding());
  expect_matches_llama(model("qwen3-embedding-0.6b", {}), sentences_file(kSentences.size()),
                       {.flags = "-ctk f16 -ctv f16", .peer_flags = ""});
}

// Rank scores in the raw format (llama-embedding's json prints past the scores' end).
TEST_F(EmbedCli, RerankerScoresMatchLlamaEmbedding) {
  if (sanitized()) GTEST_SKIP() << "bert covers the sanitized run";
  OKAPI_REQUIRE_DATA(peer_embedding());
  OKAPI_REQUIRE_DATA(bge_vocab());
  const fs::path pairs = write("pairs.txt",
                               "what is a panda?\thi\n"
                               "what is a panda?\tThe giant panda is a bear species endemic to China.\n"
                               "what is a panda?\tit's a bear\n");
  expect_matches_llama(model("bge-reranker-base", bge_vocab()), pairs,
                       {.flags = "--pooling rank --embd-normalize -1", .format = "raw", .max_score_error = 1e-4});
}

TEST_F(EmbedCli, DefaultOutputHasVectorsAndTheSimilarityMatrix) {
  OKAPI_REQUIRE_DATA(bge_vocab());
  const auto r = stdout_of(okapi() + " embed -m " + shell_quote(bert().string()) + " -p " +
                           shell_quote(kSentences[0]) + " -p " + shell_quote(kSentences[1]) + " -p " +
                           shell_quote(kSentences[2]) + " -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "embedding 0 (")) << r.output;
  EXPECT_TRUE(contains(r.output, "embedding 2 (")) << r.output;
  EXPECT_TRUE(contains(r.output, "cosine similarity matrix")) << r.output;
  EXPECT_TRUE(contains(r.output, " 1.000")) << r.output;  // the diagonal
  EXPECT_TRUE(contains(r.output, "The quick brown fox")) << r.output;
}

TEST_F(EmbedCli, JsonIsNormalizedAndIndexed) {
  OKAPI_REQUIRE_DATA(bge_vocab());
  const std::string m = shell_quote(bert().string());
  const auto r = stdout_of(okapi() + " embed -m " + m + " -p " + shell_quote("one\ntwo\nthree") + " --json -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto json = nlohmann::json::parse(r.output);
  ASSERT_EQ(json["object"], "list");
  ASSERT_EQ(json["data"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(json["data"][i]["index"], i);
    EXPECT_EQ(json["data"][i]["object"], "embedding");
    const auto v = json["data"][i]["embedding"].get<std::vector<double>>();
    EXPECT_EQ(v.size(), 64u);
    double norm = 0;
    for (const double x : v) norm += x * x;
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
  // json+ adds the matrix; array is the bare vectors; -o writes the same bytes to a file.
  const auto plus = stdout_of(okapi() + " embed -m " + m + " -p " + shell_quote("one\ntwo") +
                              " --embd-output-format json+ -t 2");
  ASSERT_EQ(plus.exit_code, 0) << plus.output;
  EXPECT_EQ(nlohmann::json::parse(plus.output)["cosineSimilarity"].size(), 2u);
  const auto array = stdout_of(okapi() + " embed -m " + m + " -p one -p two --embd-output-format array -t 2");
  ASSERT_EQ(array.exit_code, 0) << array.output;
  EXPECT_EQ(nlohmann::json::parse(array.output).size(), 2u);
  const fs::path out = *dir_ / "out.json";
  const auto written = stdout_of(okapi() + " embed -m " + m + " -p " + shell_quote("one\ntwo\nthree") +
                                 " --json -t 2 -o " + shell_quote(out.string()));
  ASSERT_EQ(written.exit_code, 0) << written.output;
  EXPECT_EQ(written.output, "");
  EXPECT_EQ(test::read_file(out), r.output);
}

TEST_F(EmbedCli, EmptyLinesOfAFileAreSkipped) {
  OKAPI_REQUIRE_DATA(bge_vocab());
  const fs::path file = write("gaps.txt", "\nfirst line\n\n\nsecond line\n\n");
  const auto r = stdout_of(okapi() + " embed -m " + shell_quote(bert().string()) + " -f " +
                           shell_quote(file.string()) + " --json -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["data"].size(), 2u);
}

TEST_F(EmbedCli, BytesThatAreNotUtf8AreEmbeddedAsRunTakesThem) {
  OKAPI_REQUIRE_DATA(bge_vocab());
  const fs::path file = write("latin1.txt", "caf\xe9 cr\xe8me\nplain text\n");
  const auto r = run_command(okapi() + " embed -m " + shell_quote(bert().string()) + " -f " +
                             shell_quote(file.string()) + " -t 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "cosine similarity matrix")) << r.output;
}

TEST_F(EmbedCli, Errors) {
  OKAPI_REQUIRE_DATA(bge_vocab());
  const std::string m = " embed -m " + shell_quote(bert().string()) + " -t 2";
  const auto no_input = test::run_cli(m);
  EXPECT_EQ(no_input.exit_code, 2) << no_input.output;
  EXPECT_TRUE(contains(no_input.output, "okapi: error: embed: no input")) << no_input.output;
  const auto empty = test::run_cli(m + " -p ''");
  EXPECT_EQ(empty.exit_code, 1) << empty.output;
  EXPECT_TRUE(contains(empty.output, "input 0 is empty")) << empty.output;
  const auto empty_piece = test::run_cli(m + " -p " + shell_quote("a\n\nb"));
  EXPECT_EQ(empty_piece.exit_code, 1) << empty_piece.output;
  EXPECT_TRUE(contains(empty_piece.output, "input 1 is empty")) << empty_piece.output;
  const auto pooling = test::run_cli(m + " -p hi --pooling maximum");
  EXPECT_EQ(pooling.exit_code, 2) << pooling.output;
  EXPECT_TRUE(contains(pooling.output, "--pooling")) << pooling.output;
  const auto missing = test::run_cli(m + " -f " + shell_quote((*dir_ / "nope.txt").string()));
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(contains(missing.output, "does not exist")) << missing.output;
  const auto blank = test::run_cli(m + " -f " + shell_quote(write("blank.txt", "\n\n").string()));
  EXPECT_EQ(blank.exit_code, 1) << blank.output;
  EXPECT_TRUE(contains(blank.output, "no input")) << blank.output;
  const auto too_long = test::run_cli(m + " -b 8 -p " + shell_quote(kSentences[2]));
  EXPECT_EQ(too_long.exit_code, 1) << too_long.output;
  EXPECT_TRUE(contains(too_long.output, "input 0 has")) << too_long.output;
  EXPECT_TRUE(contains(too_long.output, "(-b)")) << too_long.output;
  const auto rank = test::run_cli(m + " -p hi --pooling rank");
  EXPECT_EQ(rank.exit_code, 1) << rank.output;
  EXPECT_TRUE(contains(rank.output, "classifier head")) << rank.output;
  const auto directory = test::run_cli(m + " -p hi -o " + shell_quote(dir_->string()));
  EXPECT_NE(directory.exit_code, 0) << directory.output;
  EXPECT_TRUE(contains(directory.output, "directory")) << directory.output;
  const auto both = test::run_cli(m + " -p hi --json --embd-output-format array");
  EXPECT_EQ(both.exit_code, 2) << both.output;
}

TEST_F(EmbedCli, TextVerbsRefuseAnEmbeddingModel) {
  OKAPI_REQUIRE_DATA(bge_vocab());
  const std::string m = shell_quote(bert().string());
  for (const std::string& verb : {std::string(" run -n 4 -p hi"), std::string(" perplexity -f ") +
                                                                       shell_quote(sentences_file(2).string())}) {
    const auto r = test::run_cli(verb + " -m " + m + " -t 2");
    EXPECT_EQ(r.exit_code, 1) << verb << r.output;
    EXPECT_TRUE(contains(r.output, "is an embedding model (bert)")) << verb << r.output;
    EXPECT_TRUE(contains(r.output, "okapi embed")) << verb << r.output;
  }
}

}  // namespace
}  // namespace okapi
