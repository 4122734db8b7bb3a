// okapi compress's planner and writer, and the engine running what it writes: the requested
// fraction of bytes is removed, clear errors for ratios and methods it cannot serve, and a
// compressed model gives the perplexity of the dense model whose projections are the products
// of its factors (the two-matmul path computes out · (in · x) = (out · in) · x).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <filesystem>
#include <string>
#include <vector>

#include "compress/calibration.hpp"
#include "compress/low_rank.hpp"
#include "core/error.hpp"
#include "eval/perplexity.hpp"
#include "format/gguf.hpp"
#include "kernels/format_table.hpp"
#include "runtime/engine.hpp"
#include "support/paths.hpp"
#include "support/tiny_models.hpp"

namespace okapi::compress {
namespace {

namespace fs = std::filesystem;

fs::path stories260k() { return test::repo_dir() / "models/stories260K.gguf"; }

CompressOptions options(const std::string& method, std::optional<double> ratio) {
  CompressOptions o;
  o.method = method;
  o.ratio = ratio;
  return o;
}

TEST(LowRank, PlanRemovesTheRequestedBytes) {
  const auto file = gguf::File::open(stories260k());
  for (const double ratio : {0.1, 0.2}) {
    const CompressReport r = plan_compression(file, options("svd", ratio));
    EXPECT_NEAR(r.bytes_after / r.bytes_before, 1.0 - ratio, 0.01) << ratio;
    EXPECT_EQ(r.factor_type, DType::F32);
    EXPECT_GT(r.allocation_parameter, 0.0);
    EXPECT_LT(r.allocation_parameter, 1.0);
    for (const FactoredMatrix& m : r.matrices) {
      if (m.rank > 0) {
        EXPECT_LT(m.rank * (m.rows + m.cols), m.rows * m.cols) << m.name;  // smaller than dense
      }
    }
  }
  EXPECT_THROW((void)plan_compression(file, options("svd", 0.9)), Error);  // more than rank 1 can give
  EXPECT_THROW((void)plan_compression(file, options("svd", 0.0)), Error);
  EXPECT_THROW((void)plan_compression(file, options("no-such-method", 0.2)), Error);
  EXPECT_THROW((void)plan_compression(file, options("svd-llm", 0.2)), Error);  // needs calibration
  EXPECT_THROW((void)plan_compression(file, options("svd", std::nullopt)), Error);  // no ratio, no ranks file
}

// Adds PREFIX.weight = PREFIX.lr_out · in, `in` being the f32 in-factor tensor.
void write_product(const gguf::File& compressed, gguf::Writer& w, const std::string& prefix, const gguf::TensorInfo& in_tensor) {
  const gguf::TensorInfo& o = compressed.tensor(prefix + ".lr_out.weight");
  const int64_t cols = in_tensor.shape[0], rank = in_tensor.shape[1], rows = o.shape[1];
  const auto* in = reinterpret_cast<const float*>(in_tensor.data);
  const auto* outf = reinterpret_cast<const float*>(o.data);
  std::vector<float> dense(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t p = 0; p < rank; ++p)
      for (int64_t j = 0; j < cols; ++j) dense[static_cast<size_t>(i * cols + j)] += outf[i * rank + p] * in[p * cols + j];
  std::vector<uint8_t> bytes(dense.size() * 4);
  std::memcpy(bytes.data(), dense.data(), bytes.size());
  w.add_tensor(prefix + ".weight", DType::F32, {cols, rows}, std::move(bytes));
}

// The dense model whose projections are out · in of `compressed`'s factors.
void write_reconstructed(const gguf::File& compressed, const fs::path& out) {
  gguf::Writer w;
  w.copy_metadata(compressed);
  for (const gguf::TensorInfo& t : compressed.tensors()) {
    if (t.name.ends_with(".lr_out.weight")) continue;
    if (!t.name.ends_with(".lr_in.weight")) {
      w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
      continue;
    }
    write_product(compressed, w, t.name.substr(0, t.name.size() - std::string(".lr_in.weight").size()), t);
  }
  // Projections whose in-factor is another's (a shared basis) name it in metadata.
  for (const gguf::KeyValue& kv : compressed.metadata()) {
    if (!kv.key.starts_with("okapi.lr_in.")) continue;
    write_product(compressed, w, kv.key.substr(std::string("okapi.lr_in.").size()), compressed.tensor(kv.value.as_string()));
  }
  w.write(out);
}

TEST(LowRank, EngineRunsTheFactorsAsTheirProduct) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-low-rank-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto file = gguf::File::open(stories260k());
  int64_t factored = 0;
  const CompressReport r = compress_model(file, dir / "c.gguf", options("svd", 0.2),
                                          [&](const FactoredMatrix&) { ++factored; });
  ASSERT_GT(factored, 0);
  const auto compressed = gguf::File::open(dir / "c.gguf");
  EXPECT_EQ(compressed.at("okapi.compress.method").as_string(), "svd");
  EXPECT_NEAR(static_cast<double>(fs::file_size(dir / "c.gguf")) / static_cast<double>(fs::file_size(stories260k())),
              r.bytes_after / r.bytes_before, 0.01);
  write_reconstructed(compressed, dir / "dense.gguf");

  const std::string text = okapi::read_text_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  eval::PerplexityOptions ppl;
  ppl.n_ctx = 64;
  const auto run = [&](const fs::path& model) {
    const auto engine = runtime::Engine::load(model, {1});
    return eval::compute_perplexity(*engine, text, ppl).ppl;
  };
  const double low_rank = run(dir / "c.gguf"), dense = run(dir / "dense.gguf"), original = run(stories260k());
  EXPECT_NEAR(low_rank / dense, 1.0, 1e-4);
  EXPECT_GT(low_rank, original);  // 20% of the bytes gone from a 260K model costs something
  fs::remove_all(dir);
}

// Every method, including the shared bases (GRC within a layer, Basis Sharing across layers) and
// the calibrated metrics: the engine's result is the dense product's, and the bytes are as planned.
TEST(LowRank, EveryMethodRunsAsItsProduct) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-low-rank-all-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string text = okapi::read_text_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  CalibrationOptions calib_options;
  calib_options.n_ctx = 64;
  const Calibration calibration = calibrate(stories260k(), text, calib_options);
  ASSERT_GT(calibration.tokens, 0);
  ASSERT_NE(calibration.input_of("blk.0.attn_k.weight"), nullptr);
  EXPECT_EQ(calibration.input_of("blk.0.attn_k.weight"), calibration.input_of("blk.0.attn_q.weight"));  // one x
  const auto file = gguf::File::open(stories260k());
  eval::PerplexityOptions ppl;
  ppl.n_ctx = 64;
  const auto run = [&](const fs::path& model) {
    const auto engine = runtime::Engine::load(model, {1});
    return eval::compute_perplexity(*engine, text, ppl).ppl;
  };
  for (const std::string& method : compress_methods()) {
    CompressOptions options;
    options.method = method;
    options.ratio = method == "grc" ? 0.05 : 0.15;  // GRC factors Q/K/V only
    options.calibration = &calibration;
    const CalibrationSource source{stories260k(), text, calib_options};
    options.source = &source;
    const fs::path out = dir / (method + ".gguf");
    const CompressReport r = compress_model(file, out, options);
    EXPECT_NEAR(r.bytes_after / r.bytes_before, 1.0 - *options.ratio, 0.02) << method;
    const auto compressed = gguf::File::open(out);
    EXPECT_EQ(compressed.at("okapi.compress.method").as_string(), method);
    // GRC: K uses Q's basis in its layer; Basis Sharing: layer 1 uses layer 0's.
    EXPECT_EQ(compressed.find("okapi.lr_in.blk.0.attn_k") != nullptr, method == "grc") << method;
    EXPECT_EQ(compressed.find("okapi.lr_in.blk.1.attn_k") != nullptr, method == "grc" || method == "basis-sharing")
        << method;
    write_reconstructed(compressed, dir / "dense.gguf");
    EXPECT_NEAR(run(out) / run(dir / "dense.gguf"), 1.0, 1e-4) << method;
  }
  fs::remove_all(dir);
}

// phi3's fused attn_qkv and ffn_up, which the model uses as row ranges: calibrated through the
// ranges, factored whole, and the factored model runs as the dense product of its factors.
TEST(LowRank, FusedTensorsOfPhi3RunAsTheirProduct) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-low-rank-phi3-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path model = dir / "phi3.gguf";
  {
    const std::vector<uint8_t> bytes = test::tiny_model("phi3");
    std::ofstream(model, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                 static_cast<std::streamsize>(bytes.size()));
  }
  const std::string text = okapi::read_text_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  CalibrationOptions calib_options;
  calib_options.n_ctx = 64;
  const Calibration calibration = calibrate(model, text, calib_options);
  ASSERT_NE(calibration.input_of("blk.0.ffn_up.weight"), nullptr);
  EXPECT_EQ(calibration.input_of("blk.0.attn_qkv.weight"), calibration.input_of("blk.0.attn_qkv.weight[k]"));
  const auto file = gguf::File::open(model);
  eval::PerplexityOptions ppl;
  ppl.n_ctx = 64;
  const auto run = [&](const fs::path& m) {
    const auto engine = runtime::Engine::load(m, {1});
    return eval::compute_perplexity(*engine, text, ppl).ppl;
  };
  for (const std::string method : {"svd", "best"}) {
    CompressOptions options;
    options.method = method;
    options.ratio = 0.15;
    options.calibration = &calibration;
    const CalibrationSource source{model, text, calib_options};
    options.source = &source;
    const fs::path out = dir / (method + ".gguf");
    (void)compress_model(file, out, options);
    const auto compressed = gguf::File::open(out);
    EXPECT_NE(compressed.find_tensor("blk.0.ffn_up.lr_out.weight"), nullptr) << method;
    write_reconstructed(compressed, dir / "dense.gguf");
    EXPECT_NEAR(run(out) / run(dir / "dense.gguf"), 1.0, 1e-4) << method;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::compress
