// okapi analyze as a user runs it: a table row or JSON object per weight matrix with the documented
// fields, plots written where asked (and never over the model), clear errors for a filter that
// matches nothing and for files that are not models. The hidden-state analyses (--intrinsic-dim,
// --gtc over -f TEXT): a JSON object per layer and transition, tables and plots, and usage errors
// for flags that need each other, texts that are missing, empty or too short.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;

std::string model() { return (test::repo_dir() / "models/stories260K.gguf").string(); }
std::string story() { return (test::repo_dir() / "examples/story.txt").string(); }

std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

TEST(AnalyzeCli, JsonObjectPerMatrix) {
  const auto r = test::run_command("( " + test::cli_path().string() + " analyze -m " + model() +
                                   " --filter blk.0. --json 2>/dev/null )");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> rows;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 7u);  // q, k, v, output, gate, down, up of layer 0
  for (const auto& row : rows) {
    for (const char* field : {"tensor", "layer", "kind", "rows", "cols", "type", "sigma_max", "effective_rank",
                              "stable_rank", "rank_90", "rank_99", "singular_values"}) {
      EXPECT_TRUE(row.contains(field)) << field;
    }
    EXPECT_EQ(row["layer"], 0);
    const auto sigma = row["singular_values"].get<std::vector<double>>();
    EXPECT_EQ(sigma.size(), std::min(row["rows"].get<size_t>(), row["cols"].get<size_t>()));
    for (size_t i = 1; i < sigma.size(); ++i) EXPECT_LE(sigma[i], sigma[i - 1]);
    EXPECT_GT(row["effective_rank"].get<double>(), 1.0);
    EXPECT_LE(row["rank_90"].get<int>(), row["rank_99"].get<int>());
  }
}

TEST(AnalyzeCli, TableAndPlots) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-analyze-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto r = test::run_cli("analyze -m " + model() + " --filter attn_k --svg " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| blk.4.attn_k.weight"), std::string::npos) << r.output;
  for (const char* name : {"spectra-attn_k.svg", "effective-rank.svg"}) {
    const fs::path svg = dir / name;
    ASSERT_TRUE(fs::is_regular_file(svg)) << svg;
    EXPECT_GT(fs::file_size(svg), 500u);
  }
  fs::remove_all(dir);
}

TEST(AnalyzeCli, ClearErrors) {
  const auto none = test::run_cli("analyze -m " + model() + " --filter no_such_tensor");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("okapi: error: analyze: no 2-D weight matrix"), std::string::npos) << none.output;
  const auto text = test::run_cli("analyze -m " + (test::repo_dir() / "README.md").string());
  EXPECT_NE(text.exit_code, 0);
  EXPECT_NE(text.output.find("okapi: error:"), std::string::npos) << text.output;
  // --svg naming the model itself: refused before anything is written.
  const auto over = test::run_cli("analyze -m " + model() + " --svg " + model());
  EXPECT_NE(over.exit_code, 0);
  EXPECT_NE(over.output.find("okapi: error:"), std::string::npos) << over.output;
}

TEST(AnalyzeCli, HiddenStatesJson) {
  const auto r = test::run_command("( " + test::cli_path().string() + " analyze -m " + model() + " -f " + story() +
                                   " --intrinsic-dim --gtc --tokens 256 -c 64 -t 1 --json 2>/dev/null )");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, std::vector<nlohmann::json>> by_analysis;
  for (const auto& row : json_lines(r.output)) by_analysis[row.at("analysis").get<std::string>()].push_back(row);
  // stories260K: 5 blocks, so 6 states (the input of each block and the final one).
  const auto& dims = by_analysis["intrinsic_dim"];
  ASSERT_EQ(dims.size(), 6u);
  for (size_t l = 0; l < dims.size(); ++l) {
    EXPECT_EQ(dims[l]["layer"], l);
    EXPECT_EQ(dims[l]["final"], l == 5);
    EXPECT_EQ(dims[l]["tokens"], 256);
    EXPECT_GT(dims[l]["two_nn"].get<double>(), 1.0);
    EXPECT_GT(dims[l]["two_nn_quarter"].get<double>(), 1.0);
    EXPECT_LE(dims[l]["pca_90"].get<int>(), dims[l]["pca_99"].get<int>());
    EXPECT_LE(dims[l]["pca_99"].get<int>(), 64);
  }
  ASSERT_EQ(by_analysis["gtc"].size(), 1u);
  const auto& gtc = by_analysis["gtc"][0];
  EXPECT_EQ(gtc["stored"], 192);
  EXPECT_EQ(gtc["queries"], 64);
  EXPECT_EQ(gtc["tolerance"], 0.05);
  EXPECT_EQ(gtc["logits_measured"], true);
  const auto& steps = by_analysis["gtc_step"];
  const auto& logits = by_analysis["gtc_logits"];
  ASSERT_EQ(steps.size(), 5u);
  ASSERT_EQ(logits.size(), 5u);
  for (size_t a = 0; a < 5; ++a) {
    EXPECT_EQ(steps[a]["from"], a);
    EXPECT_EQ(steps[a]["to"], a + 1);
    EXPECT_EQ(logits[a]["to"], 5);
    EXPECT_EQ(logits[a]["blocks_skipped"], 5 - a);
    for (const char* p : {"skip", "linear", "nearest", "nearest+delta", "nearest+J", "nearest+localJ"}) {
      const auto& sc = steps[a]["predictors"][p];
      EXPECT_GE(sc["hit_rate"].get<double>(), 0.0) << p;
      EXPECT_LE(sc["hit_rate"].get<double>(), 1.0) << p;
      EXPECT_GE(sc["mean_relative_error"].get<double>(), 0.0) << p;
      EXPECT_GE(logits[a]["predictors"][p]["kl"].get<double>(), 0.0) << p;
    }
  }
}

TEST(AnalyzeCli, HiddenStateTablesAndPlots) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-analyze-states-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto r = test::run_cli("analyze -m " + model() + " -f " + story() +
                               " --intrinsic-dim --gtc --tokens 200 -c 64 -t 1 --gtc-tolerance 0.1 --svg " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("## Intrinsic dimension of the residual stream (200 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| final |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hit = relative error < 0.1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| from | skipped |"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("| tensor"), std::string::npos) << "spectra ran without --spectra";
  for (const char* name : {"intrinsic-dimension.svg", "gtc-hit-rate.svg", "gtc-logits.svg"}) {
    const fs::path svg = dir / name;
    ASSERT_TRUE(fs::is_regular_file(svg)) << svg;
    EXPECT_GT(fs::file_size(svg), 500u);
  }
  EXPECT_FALSE(fs::exists(dir / "effective-rank.svg"));
  fs::remove_all(dir);
}

TEST(AnalyzeCli, HiddenStateErrors) {
  const auto expect_error = [](const std::string& args, int code, const std::string& message) {
    const auto r = test::run_cli("analyze -m " + model() + " " + args);
    EXPECT_EQ(r.exit_code, code) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("okapi: error: "), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  };
  expect_error("--intrinsic-dim", 2, "give it with -f TEXT");
  expect_error("--gtc --tokens 100", 2, "give it with -f TEXT");
  expect_error("-f " + story(), 2, "-f TEXT is read only by --intrinsic-dim and --gtc");
  expect_error("--tokens 100", 2, "--tokens applies to --intrinsic-dim and --gtc");
  expect_error("--intrinsic-dim -f " + story() + " --gtc-tolerance 0.1", 2, "apply to --gtc");
  expect_error("--intrinsic-dim -f " + story() + " --gtc-neighbours 8", 2, "apply to --gtc");
  expect_error("--gtc -f " + story() + " --gtc-neighbours 0", 2, "--gtc-neighbours");
  expect_error("--intrinsic-dim -f " + story() + " --filter attn_q", 2, "--filter selects weight matrices for --spectra");
  expect_error("--gtc -f " + story() + " --tokens 10", 2, "--tokens");
  expect_error("--gtc -f " + story() + " --gtc-tolerance 0", 2, "--gtc-tolerance");
  expect_error("--gtc -f /no/such/text.txt", 1, "/no/such/text.txt");

  const fs::path dir = test::make_temp_dir("analyze-text");
  const fs::path empty = dir / "empty.txt", short_text = dir / "short.txt";
  std::ofstream(empty).close();
  std::ofstream(short_text) << "Once upon a time there was a cat.\n";
  expect_error("--gtc -f " + empty.string(), 1, "is empty");
  expect_error("--intrinsic-dim -f " + short_text.string(), 1, "at least 64 are needed");
  // A plot directory over the text: refused before anything runs.
  expect_error("--gtc -f " + story() + " --svg " + story(), 1, "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi
