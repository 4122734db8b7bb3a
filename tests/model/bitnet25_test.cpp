// bitnet-25 (Microsoft BitNet b1.58 2B4T layout: sub-norms, ReLU² FFN, tied, GQA) against
// ik_llama.cpp's goldens (golden/ik, README §3, §5, §7).
// Bounds. F32 weights, F32 KV vs the float64 reference: float32 summation order only (README §7:
// ~1e-4 expected; measured 6e-6): 1e-4. vs
// ik's K32/V16 golden with okapi's K F32 / V F16 cache: the engines round softmax·V with an F16 V
// differently (README §6: 3e-3 between engines): 0.01. IQ2_BN / IQ1_BN (w512): the ternary
// weights are lossless, but token_embd is Q6_K and ik quantizes activations to Q8_K64 in its
// IQ*_BN dot products while okapi dots dequantized rows with float activations (these formats
// have no vec_dot), so compare top-1 (>= 99% with near-ties, >= 95% strict) and KL, against both
// the IQ goldens and the exact-weight w512-F32 goldens.
#include "quantize/mix.hpp"
#include "quantize/model_quantizer.hpp"
#include "reference_logits.hpp"
#include "support/isa_under_test.hpp"

namespace okapi::test {
namespace {

// Before main: the tier a per-tier copy of this binary runs at (tests/CMakeLists.txt).
const bool kIsaUnderTest = select_isa_under_test();

TEST(Bitnet25, RunsAtTheTierAsked) { EXPECT_EQ(tier_mismatch(), "") << (kIsaUnderTest ? "per-tier copy" : "default run"); }

TEST(Bitnet25, F32MatchesFloat64Reference) {
  OKAPI_REQUIRE_SHARED();
  check_ik_float64_reference("golden-bitnet-25-F32", 1e-4);
}

TEST(Bitnet25, F32MatchesIkK32V16) {
  OKAPI_REQUIRE_SHARED();
  check_ik_golden(k32v16_case("golden-bitnet-25-F32", 0.01, 1.0, 1.0));
}

TEST(Bitnet25, IqBn) {
  OKAPI_REQUIRE_SHARED();
  for (const char* name : {"golden-bitnet-25-w512-IQ2_BN", "golden-bitnet-25-w512-IQ1_BN"}) {
    check_ik_golden(k32v16_case(name, 0.0, 0.99, 0.95));
    // Against the exact-weight model the file's own loss shows: its token_embd (embedding and
    // lm_head) is Q6_K, which flips argmaxes at golden gaps up to ~0.2 (llama.cpp's bitnet TQ2_0
    // with its Q6_K token_embd vs F32: 567/615 = 92% top-1), so strict top-1 >= 90% here.
    GoldenCase exact = k32v16_case(name, 0.0, 0.99, 0.90);
    exact.logits_dir = "golden-bitnet-25-w512-F32";
    check_ik_golden(exact);
  }
}

// The w512 IQ2_BN golden model requantized by okapi to each ternary format it runs with integer
// kernels (TQ2_0, TQ1_0: Q8_K activations like ik's Q8_K64; I2_S: per-token int8). Its per-row scales
// are one per tensor, so every format holds the same weights (TQ*_0 round the scale to fp16);
// token_embd stays Q6_K (I2_S: F16 from the Q6_K values). The IQ formats' bounds.
TEST(Bitnet25, EveryOkapiTernaryFormatMatchesIkIq2Bn) {
  OKAPI_REQUIRE_SHARED();
  const std::filesystem::path dir = make_temp_dir("bitnet25-ternary");
  for (const char* type : {"TQ2_0", "TQ1_0", "I2_S"}) {
    SCOPED_TRACE(type);
    const std::string file = std::string("golden-bitnet-25-w512-") + type + ".gguf";
    quantize::QuantizeOptions options;
    options.mix.file_type = quantize::mix_by_name(type).file_type;
    options.allow_requantize = true;  // the input is IQ2_BN
    quantize::quantize_model(ik_models() / "golden-bitnet-25-w512-IQ2_BN.gguf", dir / file, options);
    // I2_S meets per-token int8 activations (one scale per row of 512, not per 64 as ik's Q8_K64):
    // measured 203-205 of 214 strict top-1 across the tiers, all flips at near-ties.
    const double strict = std::string(type) == "I2_S" ? 0.93 : 0.95;
    GoldenCase gc = k32v16_case("golden-bitnet-25-w512-IQ2_BN", 0.0, 0.99, strict);
    gc.model_file = file;
    check_golden_case(dir, ik_logits(), gc);
  }
  std::filesystem::remove_all(dir);
}

TEST(Bitnet25, IncrementalMatchesBatch) {
  OKAPI_REQUIRE_SHARED();
  check_incremental_on_wikitext(ik_models(), ik_logits(), "golden-bitnet-25-F32");
}

}  // namespace
}  // namespace okapi::test
