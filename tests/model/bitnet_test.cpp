// llama.cpp's `bitnet` architecture (sub-norms, SiLU-gated FFN, NEOX rope, lm_head = token_embd)
// against llama.cpp's goldens (golden/public, README §3, §5), and bitllama2.c checkpoints
// converted by okapi (constant 1/n norm weights, epsilon 0).
// Bounds: F32 weights + F32 KV differ from llama.cpp only by summation order (its own batch vs
// incremental: 2.6e-6): 1e-4. F32 weights with an F16 KV cache against the primary (F16 KV)
// golden: fp16 roundings of K/V may flip (llama.cpp's own batch vs incremental 0.0011): 0.02.
// TQ2_0 / TQ1_0: lossless ternary weights, but activations are quantized to Q8_K in the dot
// products and a flipped rounding moves logits by up to ~0.07 (llama.cpp's own batch vs
// incremental 0.067-0.070 with argmax flips): top-1 >= 99% with near-ties, KL printed.
#include <cmath>

#include "eval/perplexity.hpp"
#include "format/convert_llama2c.hpp"
#include "quantize/mix.hpp"
#include "quantize/model_quantizer.hpp"
#include "reference_logits.hpp"
#include "runtime/engine.hpp"
#include "support/cache_types.hpp"
#include "support/isa_under_test.hpp"

namespace okapi::test {
namespace {

// Before main: the tier a per-tier copy of this binary runs at (tests/CMakeLists.txt).
const bool kIsaUnderTest = select_isa_under_test();

TEST(Bitnet, RunsAtTheTierAsked) { EXPECT_EQ(tier_mismatch(), "") << (kIsaUnderTest ? "per-tier copy" : "default run"); }

TEST(Bitnet, F32) {
  OKAPI_REQUIRE_SHARED();
  check_public_golden(kvf32_case("golden-bitnet-F32", 1e-4, 1.0, 1.0));
}

TEST(Bitnet, F32WithF16Cache) {
  OKAPI_REQUIRE_SHARED();
  check_public_golden({"golden-bitnet-F32.gguf", "golden-bitnet-F32", "", "f16", "f16", 0.02, 1.0, 0.99});
}

TEST(Bitnet, Ternary) {
  OKAPI_REQUIRE_SHARED();
  for (const char* name : {"golden-bitnet-TQ2_0", "golden-bitnet-TQ1_0"})
    check_public_golden(kvf32_case(name, 0.0, 0.99, 0.95));
}

// bitnet.cpp's I2_S, written by okapi quantize from the F32 golden model (ternary weights, one
// scale per tensor, so the weights are lossless) against llama.cpp's F32 goldens. The
// activations are quantized per token to int8 in the dot products (bitnet.cpp's I8_S) and the
// embeddings become F16: the bounds of the TQ formats.
TEST(Bitnet, I2SFromTheF32Model) {
  OKAPI_REQUIRE_SHARED();
  const std::filesystem::path dir = make_temp_dir("bitnet-i2s");
  quantize::QuantizeOptions options;
  options.mix.file_type = quantize::FileType::MOSTLY_I2_S;
  quantize::quantize_model(public_models() / "golden-bitnet-F32.gguf", dir / "golden-bitnet-I2_S.gguf", options);
  GoldenCase gc = kvf32_case("golden-bitnet-F32", 0.0, 0.99, 0.95);
  gc.model_file = "golden-bitnet-I2_S.gguf";
  check_golden_case(dir, public_logits(), gc);
  std::filesystem::remove_all(dir);
}

TEST(Bitnet, IncrementalMatchesBatch) {
  OKAPI_REQUIRE_SHARED();
  check_incremental_on_wikitext(public_models(), public_logits(), "golden-bitnet-F32");
}

// bitllama2.c checkpoints: epsilon 0 and constant 1/n norm weights must give finite logits, a
// consistent KV cache and a readable greedy story.
TEST(Bitnet, ConvertedBitllama2c) {
  OKAPI_REQUIRE_SHARED();
  const std::filesystem::path dir = make_temp_dir("bitnet-convert");
  for (const char* name : {"bitnet-1M-tinystories", "bitnet-3M-tinystories"}) {
    const std::filesystem::path gguf_path = dir / (std::string(name) + ".gguf");
    llama2c::convert_file(okapi::shared_dir() / "models" / (std::string(name) + ".bin"),
                          okapi::shared_dir() / "models/tok512.bin", gguf_path, {});
    LoadedModel m(gguf_path);
    EXPECT_EQ(m.model().hparams().arch, "bitnet");
    EXPECT_EQ(m.model().hparams().norm_eps, 0.0f);
    const tokenizer::Tokenizer tok(tokenizer::Vocab::from_gguf(m.model().file()));
    tokenizer::EncodeOptions options;
    options.add_special = true;
    std::vector<int32_t> ids;
    for (const auto id : tok.encode("Once upon a time", options)) ids.push_back(id);
    const size_t prompt_size = ids.size();
    // Greedy continuation, re-running the whole sequence each step (small model, short story).
    const int64_t n_vocab = m.model().n_vocab();
    for (int step = 0; step < 24; ++step) {
      const std::vector<float> all = m.logits(ids, 512);
      const float* last = all.data() + (static_cast<int64_t>(ids.size()) - 1) * n_vocab;
      for (int64_t i = 0; i < n_vocab; ++i) ASSERT_TRUE(std::isfinite(last[i])) << name << " step " << step;
      ids.push_back(argmax(last, n_vocab));
    }
    const std::string story =
        tok.decode(std::span<const int32_t>(ids.data() + prompt_size, ids.size() - prompt_size));
    std::printf("  %s: Once upon a time%s\n", name, story.c_str());
    // A trained TinyStories model continues with words, not control tokens.
    EXPECT_GE(std::count(story.begin(), story.end(), ' '), 8) << name << ": " << story;
    check_incremental_matches_batch(gguf_path, ids);
  }
  std::filesystem::remove_all(dir);
}

// A trained ternary model through every ternary format okapi writes (TQ2_0, TQ1_0, I2_S): TQ2_0 and TQ1_0 hold the same
// levels and fp16 scales, so their perplexities agree (0.1%, the bound; measured equal),
// and both stay within 0.5% of the F32 file (measured 0.15%: Q8_K activations in the dot products).
TEST(Bitnet, RealModelPerplexityIsTheSameInEveryTernaryFormat) {
  OKAPI_REQUIRE_SHARED();
  const std::filesystem::path dir = make_temp_dir("bitnet-ppl");
  const std::filesystem::path f32 = dir / "bitnet-3M.gguf";
  llama2c::convert_file(okapi::shared_dir() / "models/bitnet-3M-tinystories.bin", okapi::shared_dir() / "models/tok512.bin",
                        f32, {});
  const std::string text = okapi::read_text_file(okapi::shared_dir() / "text/tinystories-valid-head.txt");
  const auto perplexity = [&](const std::filesystem::path& path) {
    const auto engine = runtime::Engine::load(path, {2, test::cache_types("f16", "f16")});
    eval::PerplexityOptions options;
    options.n_ctx = 256;
    options.batch_size = 256;
    options.n_chunks = 8;
    return eval::compute_perplexity(*engine, text, options).ppl;
  };
  const double ppl_f32 = perplexity(f32);
  EXPECT_LT(ppl_f32, 6.0);  // a trained model (3.4 measured), not noise
  std::vector<double> ternary;
  for (const char* type : {"TQ2_0", "TQ1_0", "I2_S"}) {
    SCOPED_TRACE(type);
    const std::filesystem::path out = dir / (std::string("bitnet-3M-") + type + ".gguf");
    quantize::QuantizeOptions options;
    options.mix.file_type = quantize::mix_by_name(type).file_type;
    quantize::quantize_model(f32, out, options);
    ternary.push_back(perplexity(out));
    EXPECT_LE(std::abs(ternary.back() - ppl_f32) / ppl_f32, 5e-3) << ternary.back() << " vs F32 " << ppl_f32;
  }
  EXPECT_LE(std::abs(ternary[0] - ternary[1]) / ternary[0], 1e-3) << ternary[0] << " vs " << ternary[1];
  // I2_S meets per-token int8 activations (bitnet.cpp's, the BitNet b1.58 definition) and keeps
  // F16 embeddings: measured 0.05% from F32, the TQ formats 0.11% (8 chunks of 256).
  EXPECT_LE(std::abs(ternary[2] - ppl_f32) / ppl_f32, 1e-3) << "I2_S " << ternary[2] << " vs F32 " << ppl_f32;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace okapi::test
