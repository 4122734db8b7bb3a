// qwen2 (Q/K/V biases, NEOX rope, tied output, GPT-2 BPE vocab) against llama.cpp's F32-KV
// goldens. Its weights are F16, so activations are rounded to fp16 in every mat-mul: bound 0.02
// as for the other F16 models (llama.cpp's own batch vs incremental: 0.0026).
#include <cstring>

#include "golden_logits.hpp"
#include "kernels/format_table.hpp"

namespace okapi::test {
namespace {

TEST(Qwen2Golden, F16) {
  OKAPI_REQUIRE_SHARED();
  check_public_golden(kvf32_case("golden-qwen2-F16", 0.02, 1.0, 0.99));
}

TEST(Qwen2Golden, Q8_0) {
  OKAPI_REQUIRE_SHARED();
  check_public_golden(kvf32_case("golden-qwen2-Q8_0", 0.0, 0.99, 0.95));
}

// KV-cache validation for qwen2 with F32 weights: the F16 file widened to F32 (exact), then
// token-by-token decode must equal the full-sequence pass within 1e-4 at every position.
TEST(Qwen2Golden, IncrementalDecodeEqualsFullSequenceF32) {
  OKAPI_REQUIRE_SHARED();
  const gguf::File src = gguf::File::open(public_models() / "golden-qwen2-F16.gguf");
  gguf::Writer w;
  w.copy_metadata(src);
  w.set("general.file_type", uint32_t{0});
  for (const auto& t : src.tensors()) {
    std::vector<float> values(static_cast<size_t>(t.n_elements()));
    quant::dequantize_tensor(t.type, t.bytes(), t.shape, values.data());
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    w.add_tensor(t.name, DType::F32, t.shape, std::move(bytes));
  }
  const auto dir = make_temp_dir("qwen2_f32");
  w.write(dir / "qwen2-F32.gguf");
  {
    LoadedModel m(dir / "qwen2-F32.gguf");
    double worst = 0;
    for (const std::string& prompt : golden_prompts()) {
      const GoldenRun g = load_golden(public_logits() / "golden-qwen2-F16" / (prompt + ".kvf32.json"));
      const auto all = m.logits(g.tokens, 512), one = m.logits(g.tokens, 1);
      for (size_t i = 0; i < all.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(all[i] - one[i])));
    }
    std::printf("  qwen2 (F32 weights) batch vs token-by-token: max|d| %.3g\n", worst);
    EXPECT_LE(worst, 1e-4);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace okapi::test
