// The k-quant reference rows against llama.cpp's goldens (golden/README.md sections 6 and 7):
// dequantization of every k-quant tensor must be sha256-exact, and quantizing the F32 source
// tensor with quantize_ref must reproduce the stored blocks byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/format_table.hpp"
#include "kernels/row_checks.hpp"
#include "support/golden_files.hpp"
#include "support/paths.hpp"

namespace okapi::quant {
namespace {

using test::GoldenModel;
using test::GoldenTensor;
using test::sha_of;

const DType kKQuants[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

bool is_kquant(DType type) { return std::find(std::begin(kKQuants), std::end(kKQuants), type) != std::end(kKQuants); }

std::vector<float> dequantize_ref(const GoldenTensor& t, const std::vector<uint8_t>& raw) {
  std::vector<float> out(static_cast<size_t>(test::element_count(t.shape)));
  dequantize_tensor(t.type, raw, t.shape, out.data(), /*use_reference=*/true);
  return out;
}

struct Tally {
  int matched = 0;
  int total = 0;
};

void print_tally(const char* what, const std::map<std::string, Tally>& tally) {
  for (const auto& [type, t] : tally) std::printf("%s %s: %d/%d match\n", what, type.c_str(), t.matched, t.total);
}

TEST(KQuantGolden, DequantizeMatchesLlamaCpp) {
  OKAPI_REQUIRE_SHARED();
  std::map<std::string, Tally> tally;
  for (const auto& path : test::shared_files({"golden/public/dequant", "golden/ik/public/dequant"}, ".json")) {
    const GoldenModel model = test::load_dequant_golden(path);
    for (const GoldenTensor& t : model.tensors) {
      if (!is_kquant(t.type)) continue;
      const std::string type(dtype_name(t.type));
      const auto raw = test::read_tensor(model, t);
      ASSERT_EQ(sha_of(raw), t.raw_sha256) << path << " " << t.name;
      const bool ok = sha_of(dequantize_ref(t, raw)) == t.dequant_sha256;
      EXPECT_TRUE(ok) << path.filename() << " " << t.name << " (" << type << ")";
      tally[type].total += 1;
      tally[type].matched += ok ? 1 : 0;
    }
  }
  print_tally("dequantize", tally);
  EXPECT_EQ(tally.size(), std::size(kKQuants));  // every k-quant type was exercised
}

// Quantized model -> its F32 source (same folder layout). `exact`: made by llama.cpp c392e509's
// reference quantizers, so the bytes must match. The ik_llama.cpp file is not: ik quantizes Q6_K
// with a different (sign-searching) scale fit and builds with FMA contraction, which moves some
// Q4_K choices; for it only the quantization quality is compared. The ik bitnet-25-w512 source is
// not public, so those files are not checked.
struct QuantizeGolden {
  const char* quantized;
  const char* source;
  bool exact;
};
const QuantizeGolden kQuantizeGoldens[] = {
    {"golden/public/dequant/golden-llama-gqa-Q2_K.json", "golden/public/dequant/golden-llama-gqa-F32.json", true},
    {"golden/public/dequant/golden-llama-gqa-Q3_K_M.json", "golden/public/dequant/golden-llama-gqa-F32.json", true},
    {"golden/public/dequant/golden-llama-gqa-Q4_K_S.json", "golden/public/dequant/golden-llama-gqa-F32.json", true},
    {"golden/public/dequant/golden-llama-gqa-Q4_K_M.json", "golden/public/dequant/golden-llama-gqa-F32.json", true},
    {"golden/public/dequant/golden-llama-gqa-Q5_K_M.json", "golden/public/dequant/golden-llama-gqa-F32.json", true},
    {"golden/public/dequant/golden-llama-gqa-Q6_K.json", "golden/public/dequant/golden-llama-gqa-F32.json", true},
    {"golden/public/dequant/golden-bitnet-TQ1_0.json", "golden/public/dequant/golden-bitnet-F32.json", true},
    {"golden/public/dequant/golden-bitnet-TQ2_0.json", "golden/public/dequant/golden-bitnet-F32.json", true},
    {"golden/ik/public/dequant/golden-qwen3-Q4_K_M.json", "golden/ik/public/dequant/golden-qwen3-F32.json", false},
};

TEST(KQuantGolden, QuantizeRefMatchesLlamaQuantize) {
  OKAPI_REQUIRE_SHARED();
  std::map<std::string, Tally> tally;
  for (const QuantizeGolden& golden : kQuantizeGoldens) {
    const auto quantized_path = shared_dir() / golden.quantized;
    const GoldenModel quantized = test::load_dequant_golden(quantized_path);
    const GoldenModel source = test::load_dequant_golden(shared_dir() / golden.source);
    for (const GoldenTensor& t : quantized.tensors) {
      if (!is_kquant(t.type)) continue;
      const std::string type(dtype_name(t.type));
      const GoldenTensor* src = source.find(t.name);
      ASSERT_NE(src, nullptr) << t.name;
      ASSERT_EQ(src->type, DType::F32) << t.name;
      const auto raw = test::read_tensor(source, *src);
      std::vector<float> values(raw.size() / sizeof(float));
      std::memcpy(values.data(), raw.data(), raw.size());
      const auto blocks = quantize_tensor(t.type, values.data(), t.shape, /*use_reference=*/true);
      const bool same = sha_of(blocks) == t.raw_sha256;
      const std::string key = (golden.exact ? "" : "ik ") + type;
      tally[key].total += 1;
      tally[key].matched += same ? 1 : 0;
      if (golden.exact) {
        EXPECT_TRUE(same) << quantized_path.filename() << " " << t.name << " (" << type << ")";
        continue;
      }
      const auto theirs = test::read_tensor(quantized, t);
      const double our_error = test::relative_rms_error(values, dequantize_ref(t, blocks));
      const double their_error = test::relative_rms_error(values, dequantize_ref(t, theirs));
      EXPECT_LT(our_error, 1.05 * their_error) << quantized_path.filename() << " " << t.name;
    }
  }
  print_tally("quantize", tally);
}

}  // namespace
}  // namespace okapi::quant
