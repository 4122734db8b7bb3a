// IQ4_XS (ggml's 4.25-bit non-linear super-blocks) and the IQ4 quantizer it shares with IQ4_NL:
//  * the layout and the 6-bit block scales by hand, the dot with Q8_K against the dequantized dot;
//  * quantize_ref and quantize_weighted byte for byte as llama-quantize writes them, with and
//    without an importance matrix from llama-imatrix (llama-quantize's weights: sums / counts),
//    for IQ4_XS and IQ4_NL (--pure, every tensor whose rows fit);
//  * every tier's kernels (AVX2 dequantize / dot, AVX-512 row groups) against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "codebook_tiers.hpp"
#include "peer_tensors.hpp"
#include "row_checks.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/peer_quantize.hpp"

namespace okapi::test {
namespace {

constexpr int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

TEST(Iq4Xs, LayoutAndScalesByHand) {
  const auto& f = quant::format(DType::IQ4_XS, Isa::scalar);
  EXPECT_EQ(f.vec_dot_type, DType::Q8_K);
  EXPECT_EQ(*row_bytes(DType::IQ4_XS, 512), 272u);
  std::vector<uint8_t> block(136, 0);
  const uint16_t d = fp32_to_fp16(0.25f);
  std::memcpy(block.data(), &d, sizeof(d));
  // Block scales (6-bit, stored + 32): 0, 9, 18, ..., 54, 63.
  int ls[8];
  uint16_t high = 0;
  for (int ib = 0; ib < 8; ++ib) {
    ls[ib] = ib == 7 ? 63 : 9 * ib;
    block[4 + static_cast<size_t>(ib / 2)] |= static_cast<uint8_t>((ls[ib] & 0xF) << (4 * (ib % 2)));
    high = static_cast<uint16_t>(high | (ls[ib] >> 4) << (2 * ib));
  }
  std::memcpy(block.data() + 2, &high, sizeof(high));
  for (int i = 0; i < 128; ++i) block[8 + static_cast<size_t>(i)] = static_cast<uint8_t>((i % 16) | (15 - i % 16) << 4);
  const auto y = dequantize_row(DType::IQ4_XS, block, 256);
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = 0.25f * static_cast<float>(ls[ib] - 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[static_cast<size_t>(32 * ib + j)], dl * static_cast<float>(kLevels[j])) << ib << " " << j;
      EXPECT_EQ(y[static_cast<size_t>(32 * ib + 16 + j)], dl * static_cast<float>(kLevels[15 - j])) << ib << " " << j;
    }
  }
}

TEST(Iq4Xs, RoundTripBetweenQ4_KAndQ3_K) {
  const auto x = gaussian_row(256 * 64, 5);
  const auto err = [&](DType t) { return relative_rms_error(x, dequantize_row(t, quantize_row(t, x), 256 * 64)); };
  EXPECT_LT(err(DType::IQ4_XS), err(DType::Q3_K));
  EXPECT_LT(err(DType::IQ4_XS), 0.11);
}

TEST(Iq4Xs, DotMatchesTheDequantizedDot) {
  for (uint32_t seed = 0; seed < 5; ++seed) {
    const DotCheck c = dot_check(DType::IQ4_XS, gaussian_row(256 * 12, seed), gaussian_row(256 * 12, seed + 100));
    EXPECT_NEAR(c.dot, c.reference, 2e-6 * c.magnitude);
  }
}

// Zero blocks get d = 0 and every index 8 (the level nearest 0), as ggml writes them; NaN and inf
// inputs give some blocks but no crash.
TEST(Iq4Xs, ZeroAndNonFiniteBlocks) {
  for (DType type : {DType::IQ4_XS, DType::IQ4_NL}) {
    const std::vector<float> zero(256, 0.0f);
    const auto q = quantize_row(type, zero);
    EXPECT_EQ(dequantize_row(type, q, 256), zero);
    const size_t qs_at = type == DType::IQ4_XS ? 8 : 2, block = type == DType::IQ4_XS ? 136 : 18;
    for (size_t b = 0; b < q.size() / block; ++b) {
      for (size_t j = qs_at; j < block; ++j) EXPECT_EQ(q[b * block + j], 0x88) << dtype_name(type) << " byte " << j;
    }
    std::vector<float> bad = gaussian_row(256, 3);
    bad[5] = std::numeric_limits<float>::quiet_NaN();
    bad[70] = std::numeric_limits<float>::infinity();
    std::vector<float> w(256, 1.0f);
    std::vector<uint8_t> out(*row_bytes(type, 256));
    quant::format(type, Isa::scalar).quantize_ref(bad.data(), out.data(), 256);
    quant::format(type, Isa::scalar).quantize_weighted(bad.data(), out.data(), 256, w.data());
  }
}

// A llama model whose every matrix has rows of 256 or 512 (IQ4_XS needs multiples of 256).
TEST(Iq4Xs, EveryTierMatchesTheReference) { check_codebook_tiers(DType::IQ4_XS); }
TEST(Iq4Xs, EveryTierOfIq4NlMatchesTheReference) { check_codebook_tiers(DType::IQ4_NL); }

synth::Preset iq4_preset() {
  synth::Preset p = tiny_preset("tinyllama-1.1b");
  p.n_embd = 256;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 512;
  return p;
}

class Iq4Peer : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("iq4-peer"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(Iq4Peer, QuantizersMatchLlamaQuantizeWithAndWithoutImatrix) {
  OKAPI_REQUIRE_DATA(peer_quantize_tool());
  const auto model = write_synth_model(iq4_preset(), "", "F32", 2, dir_ / "f32.gguf");
  const auto imatrix = dir_ / "imatrix.gguf";
  peer_imatrix(model, write_calibration_text(dir_ / "calibration.txt", 600), imatrix, 128);
  const auto importance = peer_importance(imatrix);
  EXPECT_GE(importance.size(), 14u);
  for (const char* type : {"IQ4_XS", "IQ4_NL"}) {
    const DType dtype = std::string(type) == "IQ4_XS" ? DType::IQ4_XS : DType::IQ4_NL;
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(std::string(type) + (weighted ? " with imatrix" : ""));
      const auto out = dir_ / (std::string(type) + (weighted ? "-imatrix" : "") + ".gguf");
      peer_quantize(model, out, type, weighted ? imatrix : std::filesystem::path{}, {"--pure"});
      const int n = expect_same_tensor_bytes(model, out, dtype,
                                             weighted ? importance : std::map<std::string, std::vector<float>>{});
      EXPECT_GE(n, 15) << "tensors of type " << type;
    }
  }
}

// Both engines quantize activations (Q8_K, Q8_0) and sum the blocks in their own orders; a float
// difference of 1e-7 in a hidden state can move an activation level by one, which moves a logit by
// ~1e-2 at the odd position (measured: 1 of 275 positions beyond 1e-5), so the bound is loose.
TEST_F(Iq4Peer, LogitsMatchLlamaCpp) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  const auto model = write_synth_model(iq4_preset(), "", "F32", 2, dir_ / "f32.gguf");
  for (const char* type : {"IQ4_XS", "IQ4_NL"}) {
    const auto out = dir_ / (std::string(type) + ".gguf");
    peer_quantize(model, out, type, {}, {"--pure"});
    PeerCheck check;
    check.max_rel = 2e-2;
    check.min_top1 = 0.9;
    check.near_tie = 0.05f;
    expect_matches_peer(out, peer_test_prompt(), check);
  }
}

}  // namespace
}  // namespace okapi::test
