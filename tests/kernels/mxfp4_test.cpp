// MXFP4 (E8M0 block exponent, E2M1 codes, as ggml stores them):
//  * the layout, the doubled codebook and the half E8M0 scale by hand (the subnormal e = 0, 1 and
//    e = 255 included), the dot with Q8_0 against the dequantized dot;
//  * the quantizer byte for byte as llama-quantize's MXFP4_MOE writes the experts of gpt-oss and
//    qwen3moe models (it ignores importance weights: no quantize_weighted);
//  * those files' logits against llama.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.hpp"
#include "codebook_tiers.hpp"
#include "peer_tensors.hpp"
#include "row_checks.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/peer_quantize.hpp"

namespace okapi::test {
namespace {

constexpr float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};

TEST(Mxfp4, LayoutCodebookAndScaleByHand) {
  const auto& f = quant::format(DType::MXFP4, Isa::scalar);
  EXPECT_EQ(f.vec_dot_type, DType::Q8_0);
  EXPECT_EQ(f.quantize_weighted, nullptr);
  EXPECT_EQ(*row_bytes(DType::MXFP4, 64), 34u);
  for (int e : {0, 1, 2, 100, 127, 130, 254, 255}) {
    std::vector<uint8_t> block(17, 0);
    block[0] = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) block[1 + static_cast<size_t>(j)] = static_cast<uint8_t>(j | (15 - j) << 4);
    const auto y = dequantize_row(DType::MXFP4, block, 32);
    // ggml's half scale: 2^(e - 128) times the doubled value, for every e (255 gives 2^127, not inf).
    const auto want = [&](int code) { return static_cast<float>(2.0 * kE2M1[code] * std::ldexp(1.0, e - 128)); };
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[static_cast<size_t>(j)], want(j)) << e << " " << j;
      EXPECT_EQ(y[static_cast<size_t>(j + 16)], want(15 - j)) << e << " " << j;
    }
  }
}

TEST(Mxfp4, QuantizerPicksTheExponentAndNearestCodes) {
  // max |x| = 6: e = floor(log2 6) - 2 + 127 = 127, scale 1: the E2M1 values themselves.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = kE2M1[j % 16];
  x[31] = 6.0f;
  auto q = quantize_row(DType::MXFP4, x);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(dequantize_row(DType::MXFP4, q, 32), x);
  // 0.25 lies halfway between 0 and 0.5: the first code (0) wins; 5 is halfway between 4 and 6.
  x[0] = 0.25f;
  x[1] = 5.0f;
  q = quantize_row(DType::MXFP4, x);
  EXPECT_EQ(q[1] & 0xF, 0);
  EXPECT_EQ(q[2] & 0xF, 6);
  // All zeros: e = 0, every code 0; NaN and inf: some block, no crash.
  const std::vector<float> zero(64, 0.0f);
  EXPECT_EQ(quantize_row(DType::MXFP4, zero), std::vector<uint8_t>(34, 0));
  std::vector<float> bad = gaussian_row(64, 1);
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  bad[40] = -std::numeric_limits<float>::infinity();
  bad[41] = 1e-42f;
  quantize_row(DType::MXFP4, bad);
}

TEST(Mxfp4, RoundTripAndDot) {
  const auto x = gaussian_row(32 * 128, 5);
  const double err = relative_rms_error(x, dequantize_row(DType::MXFP4, quantize_row(DType::MXFP4, x), 32 * 128));
  EXPECT_LT(err, 0.2);
  EXPECT_GT(err, 0.05);
  for (uint32_t seed = 0; seed < 5; ++seed) {
    const DotCheck c = dot_check(DType::MXFP4, gaussian_row(32 * 40, seed), gaussian_row(32 * 40, seed + 100));
    EXPECT_NEAR(c.dot, c.reference, 2e-6 * c.magnitude);
  }
}

TEST(Mxfp4, EveryTierMatchesTheReference) { check_codebook_tiers(DType::MXFP4); }

synth::Preset tiny_gpt_oss() {
  synth::Preset p = tiny_preset("gpt-oss-20b");
  p.sliding_window = 8;
  p.n_expert = 8;
  p.n_expert_used = 3;
  p.n_ff_exp = 64;
  p.n_ff = 64;
  return p;
}

synth::Preset tiny_qwen3moe() {
  synth::Preset p = tiny_preset("qwen3-30b-a3b");
  p.n_expert = 8;
  p.n_expert_used = 4;
  p.n_ff_exp = 64;
  return p;
}

class Mxfp4Peer : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("mxfp4-peer"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // MXFP4_MOE (or --pure MXFP4: every matrix) of a 3-layer F32 model: the MXFP4 tensors' bytes as
  // okapi's quantizer writes them, and the logits against llama.cpp's on the same file.
  void check(const synth::Preset& preset, const std::string& stem, bool pure = false) {
    OKAPI_REQUIRE_DATA(peer_quantize_tool());
    const auto f32 = write_synth_model(preset, "", "F32", 3, dir_ / (stem + ".gguf"));
    const auto q = dir_ / (stem + "-mxfp4.gguf");
    if (pure) {
      peer_quantize(f32, q, "MXFP4_MOE", {}, {"--pure"});
      EXPECT_GE(expect_same_tensor_bytes(f32, q, DType::MXFP4), 3 * 7 + 2) << "every matrix in MXFP4";
    } else {
      peer_quantize(f32, q, "MXFP4_MOE");
      EXPECT_EQ(expect_same_tensor_bytes(f32, q, DType::MXFP4), 9) << "expert tensors in MXFP4";
      EXPECT_GE(expect_same_tensor_bytes(f32, q, DType::Q8_0), 10);
    }
    PeerCheck c;
    c.max_rel = 0;
    c.near_tie = 0.12f;  // golden_logits.hpp's kNearTie
    c.min_top1 = 0.95;
    expect_matches_peer(q, peer_test_prompt(), c);
    c.token_by_token = true;
    expect_matches_peer(q, peer_test_prompt(), c);
  }
  std::filesystem::path dir_;
};

TEST_F(Mxfp4Peer, GptOssMxfp4Moe) { check(tiny_gpt_oss(), "gpt-oss"); }
TEST_F(Mxfp4Peer, GptOssPureMxfp4) { check(tiny_gpt_oss(), "gpt-oss-pure", true); }
TEST_F(Mxfp4Peer, Qwen3MoeMxfp4Moe) { check(tiny_qwen3moe(), "qwen3moe"); }

}  // namespace
}  // namespace okapi::test
