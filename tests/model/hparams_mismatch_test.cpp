// Metadata that disagrees with the tensors must not drive allocation. A tiny model of each
// architecture gets each shape hyper-parameter set to huge, zero, negative, doubled, off-by-one and
// string values: Model::load refuses every invalid one with an error naming the key, and `okapi
// run` on such a file exits 1 with "okapi: error:" while its peak RSS stays small.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/problem_list.hpp"
#include "format/gguf.hpp"
#include "model/model.hpp"
#include "support/measured_run.hpp"
#include "support/paths.hpp"
#include "support/tiny_models.hpp"

namespace okapi::test {
namespace {

namespace fs = std::filesystem;

// Far above what a tiny model needs (tens of MB, sanitizer builds included), far below what the
// metadata claims.
constexpr int64_t kMaxWorkRssKb = 300 * 1024;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(HParamsMismatch, EveryMutationOfEveryArchitectureIsRefusedNamingItsKey) {
  for (const std::string& arch : tiny_model_archs()) {
    const std::vector<uint8_t> valid = tiny_model(arch);
    ASSERT_EQ(load_error(valid), "") << arch;
    const gguf::File file = gguf::File::parse(valid, arch);
    const std::vector<HParamMutation> mutations = hparam_mutations(file);
    ASSERT_GT(mutations.size(), 50u);
    for (const HParamMutation& m : mutations) {
      const std::string error = load_error(with_metadata(file, m.key, m.value));
      if (m.loads) {
        EXPECT_EQ(error, "") << m.label;
      } else {
        EXPECT_TRUE(contains(error, "'" + m.key + "'")) << m.label << ": " << error;
      }
    }
  }
}

TEST(HParamsMismatch, ProblemListIsCapped) {
  // Only the attention norms of the blocks are left: every other block tensor is missing. The
  // message counts them all but lists only the first few.
  const std::vector<uint8_t> valid = tiny_model("llama");  // the File views these bytes
  const gguf::File file = gguf::File::parse(valid, "llama");
  gguf::Writer w;
  w.copy_metadata(file);
  size_t dropped = 0;
  for (const auto& t : file.tensors()) {
    const bool block = t.name.rfind("blk.", 0) == 0;
    if (block && t.name.find(".attn_norm.") == std::string::npos) {
      ++dropped;
    } else {
      w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
    }
  }
  const std::string error = load_error(w.to_bytes());
  EXPECT_TRUE(contains(error, std::to_string(dropped) + " tensor problem(s)")) << error;
  EXPECT_TRUE(contains(error, "... and " + std::to_string(dropped - ProblemList::kDefaultShown) + " more")) << error;
}

TEST(HParamsMismatch, RunRefusesMutatedModelsInBoundedMemory) {
  const fs::path dir = make_temp_dir("hparams-run");
  const std::vector<uint8_t> valid = tiny_model("llama");  // the File views these bytes
  const gguf::File file = gguf::File::parse(valid, "llama");
  // One refused mutation per key (the first one listed: the huge value, 2^40).
  std::vector<std::string> seen;
  for (const HParamMutation& m : hparam_mutations(file)) {
    if (m.loads || std::find(seen.begin(), seen.end(), m.key) != seen.end()) continue;
    seen.push_back(m.key);
    const fs::path path = dir / ("mutated-" + std::to_string(seen.size()) + ".gguf");
    write_file(path, with_metadata(file, m.key, m.value));
    const MeasuredRun r = run_okapi_measured({"run", "-m", path.string(), "-n", "1", "-p", "hi"});
    EXPECT_EQ(r.exit_code, 1) << m.label << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "okapi: error:")) << m.label << ": " << r.output;
    EXPECT_TRUE(contains(r.output, m.key)) << m.label << ": " << r.output;
    EXPECT_LT(r.work_rss_kb, kMaxWorkRssKb) << m.label;
  }
  EXPECT_GE(seen.size(), 9u);
  fs::remove_all(dir);
}

TEST(HParamsMismatch, ValidModelsOfEveryArchitectureStillRun) {
  const fs::path dir = make_temp_dir("hparams-valid");
  for (const std::string& arch : tiny_model_archs()) {
    const fs::path path = dir / (arch + ".gguf");
    write_file(path, tiny_model(arch));
    const MeasuredRun r = run_okapi_measured({"run", "-m", path.string(), "-n", "4", "-p", "hi", "--temp", "0"});
    EXPECT_EQ(r.exit_code, 0) << arch << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "stop: token limit")) << arch << ": " << r.output;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::test
