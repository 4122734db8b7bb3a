// okapi compress's planner and writer, and the engine running what it writes: the requested
// fraction of bytes is removed, clear errors for ratios and methods it cannot serve, and a
// compressed model gives the perplexity of the dense model whose projections are the products
// of its factors (the two-matmul path computes out · (in · x) = (out · in) · x).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "compress/low_rank.hpp"
#include "core/error.hpp"
#include "format/gguf.hpp"
#include "quant/quant.hpp"
#include "runtime/engine.hpp"
#include "runtime/perplexity.hpp"
#include "support/paths.hpp"

namespace okapi::compress {
namespace {

namespace fs = std::filesystem;

fs::path stories260k() { return test::repo_dir() / "models/stories260K.gguf"; }

TEST(LowRank, PlanRemovesTheRequestedBytes) {
  const auto file = gguf::File::open(stories260k());
  for (const double ratio : {0.1, 0.2}) {
    const CompressReport r = plan_compression(file, {"svd", ratio, std::nullopt});
    EXPECT_NEAR(r.bytes_after / r.bytes_before, 1.0 - ratio, 0.01) << ratio;
    EXPECT_EQ(r.factor_type, DType::F32);
    EXPECT_GT(r.energy_threshold, 0.0);
    EXPECT_LT(r.energy_threshold, 1.0);
    for (const FactoredMatrix& m : r.matrices) {
      if (m.rank > 0) {
        EXPECT_LT(m.rank * (m.rows + m.cols), m.rows * m.cols) << m.name;  // smaller than dense
      }
    }
  }
  EXPECT_THROW((void)plan_compression(file, {"svd", 0.9, std::nullopt}), Error);  // more than rank 1 can give
  EXPECT_THROW((void)plan_compression(file, {"svd", 0.0, std::nullopt}), Error);
  EXPECT_THROW((void)plan_compression(file, {"grc", 0.2, std::nullopt}), Error);
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
    const std::string prefix = t.name.substr(0, t.name.size() - std::string(".lr_in.weight").size());
    const gguf::TensorInfo& o = compressed.tensor(prefix + ".lr_out.weight");
    const int64_t cols = t.shape[0], rank = t.shape[1], rows = o.shape[1];
    const auto* in = reinterpret_cast<const float*>(t.data);
    const auto* outf = reinterpret_cast<const float*>(o.data);
    std::vector<float> dense(static_cast<size_t>(rows * cols), 0.0f);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t p = 0; p < rank; ++p)
        for (int64_t j = 0; j < cols; ++j) dense[static_cast<size_t>(i * cols + j)] += outf[i * rank + p] * in[p * cols + j];
    std::vector<uint8_t> bytes(dense.size() * 4);
    std::memcpy(bytes.data(), dense.data(), bytes.size());
    w.add_tensor(prefix + ".weight", DType::F32, {cols, rows}, std::move(bytes));
  }
  w.write(out);
}

TEST(LowRank, EngineRunsTheFactorsAsTheirProduct) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-low-rank-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto file = gguf::File::open(stories260k());
  int64_t factored = 0;
  const CompressReport r = compress_model(file, dir / "c.gguf", {"svd", 0.2, std::nullopt},
                                          [&](const FactoredMatrix&) { ++factored; });
  ASSERT_GT(factored, 0);
  const auto compressed = gguf::File::open(dir / "c.gguf");
  EXPECT_EQ(compressed.at("okapi.compress.method").as_string(), "svd");
  EXPECT_NEAR(static_cast<double>(fs::file_size(dir / "c.gguf")) / static_cast<double>(fs::file_size(stories260k())),
              r.bytes_after / r.bytes_before, 0.01);
  write_reconstructed(compressed, dir / "dense.gguf");

  const std::string text = runtime::read_text_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  runtime::PerplexityOptions ppl;
  ppl.n_ctx = 64;
  const auto run = [&](const fs::path& model) {
    const auto engine = runtime::Engine::load(model, {1, "f32", "f32"});
    return runtime::compute_perplexity(*engine, text, ppl).ppl;
  };
  const double low_rank = run(dir / "c.gguf"), dense = run(dir / "dense.gguf"), original = run(stories260k());
  EXPECT_NEAR(low_rank / dense, 1.0, 1e-4);
  EXPECT_GT(low_rank, original);  // 20% of the bytes gone from a 260K model costs something
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::compress
