// okapi analyze as a user runs it: a table row or JSON object per weight matrix with the documented
// fields, plots written where asked (and never over the model), clear errors for a filter that
// matches nothing and for files that are not models.
#include <gtest/gtest.h>

#include <filesystem>
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

}  // namespace
}  // namespace okapi
