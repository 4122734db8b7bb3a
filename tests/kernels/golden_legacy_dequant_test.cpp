// Golden dequantization: every float (F32 F16 BF16), legacy (Q4_0..Q8_0) and ternary (TQ*, IQ*_BN)
// tensor of every golden model must dequantize (reference path) to exactly llama.cpp's /
// ik_llama.cpp's float32 bytes.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <string_view>

#include "kernels/format_table.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"

namespace okapi::test {
namespace {

// Checks every tensor of the golden files in `dir` (under the shared folder) whose type this suite
// covers; returns how many tensors of each type matched.
std::map<DType, int> check_dir(std::string_view dir) {
  std::map<DType, int> matched;
  for (const auto& json : shared_files({dir}, ".json")) {
    const GoldenModel model = load_dequant_golden(json);
    // ik's golden-bitnet-25-w512-F32.json describes a model kept outside public/ (size budget).
    if (!std::filesystem::exists(model.gguf)) continue;
    for (const auto& t : model.tensors) {
      if (!is_checked_type(t.type)) continue;
      const auto bytes = read_tensor(model, t);
      EXPECT_EQ(sha_of(bytes), t.raw_sha256) << json.filename() << " " << t.name << ": raw bytes";
      std::vector<float> out(static_cast<size_t>(element_count(t.shape)));
      quant::dequantize_tensor(t.type, bytes, t.shape, out.data(), /*use_reference=*/true);
      EXPECT_EQ(sha_of(out), t.dequant_sha256)
          << json.filename() << " " << t.name << " (" << dtype_name(t.type) << "), first value " << out[0];
      if (sha_of(out) == t.dequant_sha256) ++matched[t.type];
    }
  }
  return matched;
}

TEST(GoldenDequant, LlamaCppModels) {
  OKAPI_REQUIRE_SHARED();
  const auto matched = check_dir("golden/public/dequant");
  std::cout << "[golden dequant, llama.cpp] " << describe_counts(matched) << "\n";
  // Every family this suite covers occurs in the llama.cpp goldens.
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q8_0, DType::TQ1_0, DType::TQ2_0}) {
    EXPECT_GT(matched.count(t) ? matched.at(t) : 0, 0) << dtype_name(t);
  }
}

TEST(GoldenDequant, IkLlamaModels) {
  OKAPI_REQUIRE_SHARED();
  const auto matched = check_dir("golden/ik/public/dequant");
  std::cout << "[golden dequant, ik_llama] " << describe_counts(matched) << "\n";
  EXPECT_EQ(matched.count(DType::IQ1_BN) ? matched.at(DType::IQ1_BN) : 0, 14);
  EXPECT_EQ(matched.count(DType::IQ2_BN) ? matched.at(DType::IQ2_BN) : 0, 14);
}

}  // namespace
}  // namespace okapi::test
