// The orthogonal gauge is the same function: a gauged model (norms folded, residual stream
// rotated to its principal axes, tied head untied) gives the original's perplexity; and models it
// cannot represent are refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "compress/calibration.hpp"
#include "compress/gauge.hpp"
#include "core/error.hpp"
#include "eval/perplexity.hpp"
#include "format/gguf.hpp"
#include "runtime/engine.hpp"
#include "support/paths.hpp"

namespace okapi::compress {
namespace {

namespace fs = std::filesystem;

TEST(Gauge, RotatedModelIsTheSameFunction) {
  const fs::path dir = fs::temp_directory_path() / ("okapi-gauge-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path model = test::repo_dir() / "models/stories260K.gguf";
  const std::string text = okapi::read_text_file(test::repo_dir() / "tests/data/runtime/stories260K-once-upon-a-time.txt");
  CalibrationOptions options;
  options.n_ctx = 64;
  const Calibration calibration = calibrate(model, text, options);
  ASSERT_EQ(calibration.residual_second_moment.size(), 64u * 64u);
  const auto file = gguf::File::open(model);
  const GaugeReport report = write_orthogonal_gauge(file, calibration.residual_second_moment, dir / "g.gguf");
  EXPECT_GT(report.top_energy, 0.1);  // PCA puts more than a uniform share in the first directions
  const auto gauged = gguf::File::open(dir / "g.gguf");
  EXPECT_NE(gauged.find("okapi.compress.gauge"), nullptr);
  eval::PerplexityOptions ppl;
  ppl.n_ctx = 64;
  const auto run = [&](const fs::path& m) {
    const auto engine = runtime::Engine::load(m, {1});
    return eval::compute_perplexity(*engine, text, ppl).ppl;
  };
  EXPECT_NEAR(run(dir / "g.gguf") / run(model), 1.0, 1e-4);
  // A moment of the wrong size, and an architecture the transform does not know.
  EXPECT_THROW(write_orthogonal_gauge(file, std::vector<double>(10, 0.0), dir / "x.gguf"), Error);
  gguf::Writer qwen;
  qwen.copy_metadata(file);
  qwen.set("general.architecture", "qwen2");
  for (const gguf::TensorInfo& t : file.tensors()) qwen.add_tensor_view(t.name, t.type, t.shape, t.bytes());
  qwen.write(dir / "qwen.gguf");
  EXPECT_THROW(write_orthogonal_gauge(gguf::File::open(dir / "qwen.gguf"), calibration.residual_second_moment, dir / "x.gguf"),
               Error);
  EXPECT_FALSE(fs::exists(dir / "x.gguf"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace okapi::compress
