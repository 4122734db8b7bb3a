// Golden quantization: the reference quantizers must reproduce llama.cpp's (and ik_llama.cpp's)
// quantized tensor bytes exactly, from the same source weights.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "kernels/format_table.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"

namespace okapi::test {
namespace {

std::string stem_of(const std::string& gguf_name) { return std::filesystem::path(gguf_name).stem().string(); }

struct Tally {
  std::map<DType, int> matched;
  int checked = 0;
};

// Quantizes source tensor `src` (any float or quantized type, dequantized to F32 first, as
// llama-quantize does) to `type` and compares with `expected_sha`.
void check_quantization(const GoldenModel& source, const GoldenTensor& src, DType type,
                        const std::string& expected_sha, const std::string& where, Tally* tally) {
  const auto weights = dequantize_golden(source, src);
  const auto bytes = quant::quantize_tensor(type, weights.data(), src.shape, /*use_reference=*/true);
  ++tally->checked;
  const auto sha = sha_of(bytes);
  EXPECT_EQ(sha, expected_sha) << where << ": " << src.name << " -> " << dtype_name(type);
  if (sha == expected_sha) ++tally->matched[type];
}

// public/quantize/<input stem>-<TYPE>.json: `llama-quantize --pure` of an F32 model.
TEST(GoldenQuantize, PureQuantizeGoldens) {
  OKAPI_REQUIRE_SHARED();
  const auto dir = golden_dir() / "public" / "quantize";
  Tally tally;
  const auto index = load_json(dir / "index.json");
  for (const auto& entry : index.at("files")) {
    const auto j = load_json(dir / entry.at("file").get<std::string>());
    const GoldenModel input =
        load_dequant_golden(golden_dir() / "public" / "dequant" / (stem_of(j.at("input_file")) + ".json"));
    for (const auto& [name, t] : j.at("tensors").items()) {
      const auto type = dtype_from_name(t.at("type").get<std::string>());
      if (!t.at("quantized").get<bool>() || !type || !is_checked_type(*type)) continue;
      const GoldenTensor* src = input.find(name);
      ASSERT_NE(src, nullptr) << name;
      ASSERT_EQ(src->raw_sha256, t.at("input_raw_sha256").get<std::string>()) << name;
      check_quantization(input, *src, *type, t.at("raw_sha256"), entry.at("file"), &tally);
    }
  }
  std::cout << "[golden quantize, --pure] " << describe_counts(tally.matched) << "\n";
  EXPECT_EQ(tally.checked, 5 * 37 + 6 * 30);  // 11 files, as index.json lists them
}

// Regular quantized model files, re-derived from the model they were made from: every tensor of
// a covered type that differs from the source's stored bytes is re-quantized and compared.
struct Derivation {
  const char* root;  // "public" or "ik/public"
  const char* quantized;
  const char* source;
};

constexpr Derivation kDerivations[] = {
    {"public", "golden-llama-gqa-F16", "golden-llama-gqa-F32"},
    {"public", "golden-llama-gqa-BF16", "golden-llama-gqa-F32"},
    {"public", "golden-llama-gqa-Q8_0", "golden-llama-gqa-F32"},
    {"public", "golden-llama-gqa-Q5_1", "golden-llama-gqa-F32"},
    {"public", "golden-llama-gqa-Q5_0", "golden-llama-gqa-F32"},
    {"public", "golden-llama-gqa-Q4_1", "golden-llama-gqa-F32"},
    {"public", "golden-llama-gqa-Q4_0", "golden-llama-gqa-F32"},
    {"public", "golden-bitnet-TQ2_0", "golden-bitnet-F32"},
    {"public", "golden-bitnet-TQ1_0", "golden-bitnet-F32"},
    {"public", "golden-qwen2-Q8_0", "golden-qwen2-F16"},
    {"public", "stories260K-ff192-q8_0", "stories260K-ff192"},
    {"public", "stories260K-ff192-q4_0", "stories260K-ff192"},
    {"public", "stories260K-f16", "stories260K"},
    {"public", "stories260K-q8_0mix", "stories260K"},
    {"public", "stories260K-q4_0mix", "stories260K"},
    {"ik/public", "golden-qwen3-Q8_0", "golden-qwen3-F32"},
    {"ik/public", "golden-gemma3-Q8_0", "golden-gemma3-F32"},
};

TEST(GoldenQuantize, QuantizedModelFiles) {
  OKAPI_REQUIRE_SHARED();
  Tally tally;
  for (const auto& d : kDerivations) {
    const auto dequant_dir = golden_dir() / d.root / "dequant";
    const GoldenModel quantized = load_dequant_golden(dequant_dir / (std::string(d.quantized) + ".json"));
    const GoldenModel source = load_dequant_golden(dequant_dir / (std::string(d.source) + ".json"));
    for (const auto& t : quantized.tensors) {
      const GoldenTensor* src = source.find(t.name);
      ASSERT_NE(src, nullptr) << d.quantized << " " << t.name;
      if (!is_checked_type(t.type) || (t.type == src->type && t.raw_sha256 == src->raw_sha256)) continue;
      check_quantization(source, *src, t.type, t.raw_sha256, d.quantized, &tally);
    }
  }
  std::cout << "[golden quantize, model files] " << describe_counts(tally.matched) << "\n";
  EXPECT_GT(tally.checked, 0);
  for (DType t : {DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                  DType::TQ1_0, DType::TQ2_0}) {
    EXPECT_GT(tally.matched.count(t) ? tally.matched.at(t) : 0, 0) << dtype_name(t);
  }
}

}  // namespace
}  // namespace okapi::test
