// okapi quantize, run as a user would: exit codes, messages, and that the output loads back.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/mapped_file.hpp"
#include "core/sha256.hpp"
#include "format/gguf.hpp"
#include "quantize/imatrix_file.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

const std::string kModel = (test::repo_dir() / "models" / "stories260K.gguf").string();

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using test::read_file;

class QuantizeCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("quantize-cli"); }
  void TearDown() override {
    ::chmod(dir_.c_str(), 0755);
    fs::remove_all(dir_);
  }
  std::string out(const std::string& name) const { return (dir_ / name).string(); }
  size_t files_in_dir() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }
  fs::path dir_;
};

TEST_F(QuantizeCli, QuantizesAndPrintsSummary) {
  const auto r = run_cli("quantize " + kModel + " " + out("q8.gguf") + " Q8_0 -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "q8_0")) << r.output;
  EXPECT_TRUE(contains(r.output, "total")) << r.output;
  EXPECT_TRUE(contains(r.output, "bits per weight")) << r.output;
  EXPECT_TRUE(contains(r.output, "MiB")) << r.output;
  // ffn_down rows of 172 fit no 32-block: F16, and the user is told.
  EXPECT_TRUE(contains(r.output, "warning")) << r.output;
  const gguf::File q = gguf::File::open(out("q8.gguf"));
  EXPECT_EQ(q.tensors().size(), 48u);
  EXPECT_EQ(q.at("general.file_type").as_uint(), 7u);
  EXPECT_EQ(q.tensor("blk.0.attn_q.weight").type, DType::Q8_0);
  EXPECT_EQ(q.tensor("blk.0.ffn_down.weight").type, DType::F16);
  // The result inspects cleanly with the CLI too.
  EXPECT_EQ(run_cli("inspect " + out("q8.gguf")).exit_code, 0);
}

TEST_F(QuantizeCli, ThreadCountDoesNotChangeTheFile) {
  ASSERT_EQ(run_cli("quantize " + kModel + " " + out("a.gguf") + " Q4_K_M -t 1").exit_code, 0);
  ASSERT_EQ(run_cli("quantize " + kModel + " " + out("b.gguf") + " q4_k_m --threads 3").exit_code, 0);
  const MappedFile a(dir_ / "a.gguf");
  const MappedFile b(dir_ / "b.gguf");
  EXPECT_EQ(sha256_hex(a.data(), a.size()), sha256_hex(b.data(), b.size()));
}

TEST_F(QuantizeCli, OverridesAndLeaveOutput) {
  auto r = run_cli("quantize " + kModel + " " + out("o.gguf") +
                   " Q4_0 --token-embedding-type q8_0 --output-tensor-type f16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    const gguf::File q = gguf::File::open(out("o.gguf"));
    EXPECT_EQ(q.tensor("token_embd.weight").type, DType::Q8_0);
    EXPECT_EQ(q.tensor("output.weight").type, DType::F16);
    EXPECT_EQ(q.tensor("blk.2.attn_k.weight").type, DType::Q4_0);
  }
  r = run_cli("quantize " + kModel + " " + out("l.gguf") + " Q4_0 --leave-output-tensor");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const gguf::File q = gguf::File::open(out("l.gguf"));
  EXPECT_EQ(q.tensor("output.weight").type, DType::F32);
}

TEST_F(QuantizeCli, UnknownTypeListsValidOnes) {
  const auto r = run_cli("quantize " + kModel + " " + out("x.gguf") + " Q9_K");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // a usage error
  EXPECT_TRUE(contains(r.output, "Q9_K")) << r.output;
  EXPECT_TRUE(contains(r.output, "Q4_K_M")) << r.output;
  EXPECT_TRUE(contains(r.output, "TQ2_0")) << r.output;
  EXPECT_FALSE(fs::exists(out("x.gguf")));

  const auto bad_override = run_cli("quantize " + kModel + " " + out("x.gguf") + " Q8_0 --output-tensor-type q8_K");
  EXPECT_EQ(bad_override.exit_code, 1) << bad_override.output;
  EXPECT_TRUE(contains(bad_override.output, "q6_K")) << bad_override.output;  // lists valid types
}

TEST_F(QuantizeCli, MissingArgumentIsAUsageError) {
  const auto r = run_cli("quantize " + kModel + " " + out("x.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(fs::exists(out("x.gguf")));
}

TEST_F(QuantizeCli, MissingAndMalformedInput) {
  auto r = run_cli("quantize " + out("absent.gguf") + " " + out("x.gguf") + " Q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "absent.gguf")) << r.output;

  {
    std::ifstream in(kModel, std::ios::binary);
    std::string head(5000, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(dir_ / "cut.gguf", std::ios::binary).write(head.data(), static_cast<std::streamsize>(head.size()));
  }
  r = run_cli("quantize " + out("cut.gguf") + " " + out("x.gguf") + " Q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "error")) << r.output;
  EXPECT_TRUE(contains(r.output, "cut.gguf")) << r.output;
  EXPECT_FALSE(fs::exists(out("x.gguf")));
}

TEST_F(QuantizeCli, RefusesToOverwriteInput) {
  fs::copy_file(kModel, dir_ / "m.gguf");
  const auto r = run_cli("quantize " + out("m.gguf") + " " + out("m.gguf") + " Q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "input")) << r.output;
  EXPECT_EQ(fs::file_size(dir_ / "m.gguf"), fs::file_size(kModel));
}

TEST_F(QuantizeCli, UnwritableOutputDirectory) {
  auto r = run_cli("quantize " + kModel + " " + out("missing-dir/x.gguf") + " Q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "missing-dir")) << r.output;

  std::ofstream(dir_ / "plain-file") << "x";
  r = run_cli("quantize " + kModel + " " + out("plain-file/x.gguf") + " Q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.output;

  if (::getuid() != 0) {  // root writes anywhere
    fs::create_directory(dir_ / "ro");
    ::chmod((dir_ / "ro").c_str(), 0555);
    r = run_cli("quantize " + kModel + " " + out("ro/x.gguf") + " Q8_0");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "not writable")) << r.output;
  }
}

// A run that fails leaves an existing OUT as it was and no temporary file: before writing
// (an importance matrix that does not exist) and while writing (a NaN weight in the second tensor).
TEST_F(QuantizeCli, FailedRunKeepsExistingOutput) {
  std::ofstream(dir_ / "out.gguf") << "old";
  auto r = run_cli("quantize " + kModel + " " + out("out.gguf") + " Q4_K_M --imatrix " + out("none.imatrix"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "none.imatrix")) << r.output;
  EXPECT_EQ(read_file(dir_ / "out.gguf"), "old");

  gguf::Writer w;
  w.set("general.architecture", "llama");
  std::vector<float> values(64 * 8, 0.5f);
  auto bytes = [&values] {
    const auto* p = reinterpret_cast<const uint8_t*>(values.data());
    return std::vector<uint8_t>(p, p + values.size() * sizeof(float));
  };
  w.add_tensor("blk.0.attn_q.weight", DType::F32, {64, 8}, bytes());
  values[100] = std::numeric_limits<float>::infinity();
  w.add_tensor("blk.0.attn_k.weight", DType::F32, {64, 8}, bytes());
  w.write(dir_ / "inf.gguf");
  r = run_cli("quantize " + out("inf.gguf") + " " + out("out.gguf") + " Q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "blk.0.attn_k.weight")) << r.output;
  EXPECT_EQ(read_file(dir_ / "out.gguf"), "old");
  EXPECT_EQ(files_in_dir(), 2u);  // out.gguf and inf.gguf: no temp file left
}

}  // namespace
}  // namespace okapi

namespace okapi {
namespace {

// A llama-shaped file with 256-wide rows (the i-quants' block) and an importance matrix for its
// three matrices.
void write_wide_model(const fs::path& model, const fs::path& imatrix) {
  gguf::Writer w;
  w.set("general.architecture", "llama");
  w.set("llama.block_count", uint32_t{1});
  w.set("llama.attention.head_count", uint32_t{4});
  w.set("llama.attention.head_count_kv", uint32_t{4});
  quantize::Imatrix im;
  im.datasets = {"calib.txt"};
  im.chunk_count = 3;
  im.chunk_size = 64;
  int seed = 0;
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.0.ffn_down.weight"}) {
    std::vector<float> values(256 * 32);
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.37f * static_cast<float>(i + 1000 * ++seed));
    const auto* p = reinterpret_cast<const uint8_t*>(values.data());
    w.add_tensor(name, DType::F32, {256, 32}, std::vector<uint8_t>(p, p + values.size() * sizeof(float)));
    quantize::ImatrixEntry e;
    e.n_per_row = 256;
    for (int j = 0; j < 256; ++j) e.sums.push_back(static_cast<float>(1 + j % 7));
    e.counts = {10};
    im.entries[name] = e;
  }
  w.write(model);
  quantize::write_imatrix_gguf(im, imatrix);
}

TEST_F(QuantizeCli, ImportanceMatrixFlags) {
  write_wide_model(dir_ / "wide.gguf", dir_ / "wide.imatrix.gguf");
  const std::string model = out("wide.gguf");
  const std::string imatrix = out("wide.imatrix.gguf");

  auto r = run_cli("quantize " + model + " " + out("x.gguf") + " IQ2_XXS");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "needs an importance matrix")) << r.output;
  EXPECT_TRUE(contains(r.output, "--imatrix")) << r.output;
  EXPECT_FALSE(fs::exists(out("x.gguf")));

  r = run_cli("quantize " + model + " " + out("q4.gguf") + " Q4_K_M --imatrix " + imatrix);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    const gguf::File f = gguf::File::open(out("q4.gguf"));
    EXPECT_EQ(f.at("quantize.imatrix.file").as_string(), imatrix);
    EXPECT_EQ(f.at("quantize.imatrix.dataset").as_string(), "calib.txt");
    EXPECT_EQ(f.at("quantize.imatrix.entries_count").as_uint(), 3u);
    EXPECT_EQ(f.at("quantize.imatrix.chunks_count").as_uint(), 3u);
  }

  r = run_cli("quantize " + model + " " + out("q3.gguf") + " Q3_K_S --imatrix " + imatrix +
              " --exclude-weights ffn_down --tensor-type ATTN_V=q8_0 --tensor-type attn=q5_k");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    const gguf::File f = gguf::File::open(out("q3.gguf"));
    EXPECT_EQ(f.at("quantize.imatrix.entries_count").as_uint(), 2u);
    EXPECT_EQ(f.tensor("blk.0.attn_v.weight").type, DType::Q8_0);  // the first matching pattern
    EXPECT_EQ(f.tensor("blk.0.attn_q.weight").type, DType::Q5_K);
    EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").type, DType::Q3_K);
  }

  r = run_cli("quantize " + model + " " + out("x.gguf") + " Q4_K_M --imatrix " + imatrix +
              " --include-weights attn --exclude-weights ffn");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // a usage error, as llama-quantize
  for (const char* bad : {"attn_v", "attn_v=q9_K", "=q8_0", "attn_v(=q8_0"}) {
    r = run_cli("quantize " + model + " " + out("x.gguf") + " Q4_K_M --tensor-type '" + bad + "'");
    EXPECT_NE(r.exit_code, 0) << bad << ": " << r.output;
    EXPECT_TRUE(contains(r.output, bad)) << r.output;
  }
  EXPECT_FALSE(fs::exists(out("x.gguf")));

  // Already quantized input: refused without --allow-requantize.
  r = run_cli("quantize " + out("q4.gguf") + " " + out("q6.gguf") + " Q6_K");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "--allow-requantize")) << r.output;
  r = run_cli("quantize " + out("q4.gguf") + " " + out("q6.gguf") + " Q6_K --allow-requantize");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace okapi
