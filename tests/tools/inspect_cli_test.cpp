// okapi inspect, run as a user would: exit codes and output of the real binary.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

using test::run_cli;

const std::string kModel = (okapi::test::repo_dir() / "models" / "stories260K.gguf").string();

TEST(InspectCli, PrintsMetadataAndTensorTable) {
  const auto r = run_cli("inspect " + kModel);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("general.architecture"), std::string::npos);
  EXPECT_NE(r.output.find("llama"), std::string::npos);
  EXPECT_NE(r.output.find("blk.4.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.output.find("Tensors: 48"), std::string::npos) << r.output;
}

TEST(InspectCli, JsonIsParseableAndComplete) {
  const auto r = run_cli("inspect --json " + kModel);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["version"], 3);
  ASSERT_EQ(j["tensors"].size(), 48u);
  uint64_t prev_end = 0;
  for (const auto& t : j["tensors"]) {
    EXPECT_GE(t["offset"].get<uint64_t>(), prev_end);  // tensors laid out in order, no overlap
    prev_end = t["offset"].get<uint64_t>() + t["bytes"].get<uint64_t>();
  }
  EXPECT_LE(prev_end, j["file_size"].get<uint64_t>());
}

TEST(InspectCli, MissingFileFailsWithMessage) {
  const auto r = run_cli("inspect /nonexistent/model.gguf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/model.gguf"), std::string::npos) << r.output;
}

TEST(InspectCli, TruncatedFileFailsWithMessage) {
  const auto dir = okapi::test::make_temp_dir("inspect");
  const auto cut = dir / "cut.gguf";
  {
    std::ifstream in(kModel, std::ios::binary);
    std::string head(1000, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(cut, std::ios::binary).write(head.data(), static_cast<std::streamsize>(head.size()));
  }
  const auto r = run_cli("inspect " + cut.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

TEST(InspectCli, BadFlagIsAUsageError) {
  const auto r = run_cli("inspect --no-such-flag " + kModel);
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace okapi
