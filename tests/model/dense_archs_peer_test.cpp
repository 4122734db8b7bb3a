// phi3, granite and smollm3 against llama.cpp (support/peer_logits): tiny models of the
// phi-4-mini, granite-3-2b and smollm3-3b presets, every distinctive feature present:
//   phi3: fused attn_qkv and gate+up, partial rotary (12 of 16 dims), LongRoPE factors with the
//         long ones picked (original context 32 < the context) and the short ones (4096 > it),
//         the converter's attention factor, a sliding window both engines ignore;
//   granite: embedding 12, residual 0.22, attention 0.125 (not 1/sqrt(16) = 0.25), logits / 8;
//   smollm3: 4 layers, the fourth without rope.
// F32 weights: f32 and f16 KV, one batch and token by token, within 1e-3 of the largest logit
// and the same top-1; one quantized type each with the near-tie rule.
#include <gtest/gtest.h>

#include "support/paths.hpp"
#include "support/peer_logits.hpp"

namespace okapi::test {
namespace {

class DenseArchsPeer : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("dense-archs-peer"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // F32 weights: both cache types, one batch and token by token.
  void expect_f32_matches(const synth::Preset& preset, int64_t n_layer, const std::string& name) {
    const auto model = write_synth_model(preset, "", "F32", n_layer, dir_ / (name + ".gguf"));
    expect_matches_peer_every_cache_and_mode(model, peer_test_prompt());
  }

  void expect_quantized_matches(const synth::Preset& preset, int64_t n_layer, const std::string& type,
                                const std::string& name) {
    SCOPED_TRACE(name + " " + type);
    const auto model = write_synth_model(preset, "", type, n_layer, dir_ / (name + "-" + type + ".gguf"));
    PeerCheck check;
    check.max_rel = 0;
    check.near_tie = 0.12f;
    check.min_top1 = 0.95;
    expect_matches_peer(model, peer_test_prompt(), check);
  }

  std::filesystem::path dir_;
};

synth::Preset phi3_preset(int64_t original_context) {
  synth::Preset p = tiny_preset("phi-4-mini");
  EXPECT_EQ(p.rope_dims, 12);  // partial rotary: 12 of 16 dims
  p.rope_orig_context = original_context;
  return p;
}

TEST_F(DenseArchsPeer, Phi3LongRopeFactors) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_f32_matches(phi3_preset(32), 2, "phi3-long");
}

// With a sliding window shorter than the prompt (Phi-3-mini-4k has 2047), which llama.cpp ignores
// for phi3 ("Phi SWA is currently disabled"), and so does okapi.
TEST_F(DenseArchsPeer, Phi3ShortRopeFactorsWindowIgnored) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  synth::Preset p = phi3_preset(4096);
  p.sliding_window = 16;
  expect_f32_matches(p, 2, "phi3-short");
}

TEST_F(DenseArchsPeer, Phi3Q8_0) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_quantized_matches(phi3_preset(32), 2, "Q8_0", "phi3");
}

synth::Preset granite_preset() {
  synth::Preset p = tiny_preset("granite-3-2b");
  p.attention_scale = 0.125f;  // != 1/sqrt(head_dim 16): the key must be used
  return p;
}

TEST_F(DenseArchsPeer, GraniteScales) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_f32_matches(granite_preset(), 2, "granite");
}

TEST_F(DenseArchsPeer, GraniteQ4_K_M) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_quantized_matches(granite_preset(), 2, "Q4_K_M", "granite");
}

TEST_F(DenseArchsPeer, SmolLM3NoRopeLayer) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_f32_matches(tiny_preset("smollm3-3b"), 4, "smollm3");
}

TEST_F(DenseArchsPeer, SmolLM3Q8_0) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_quantized_matches(tiny_preset("smollm3-3b"), 4, "Q8_0", "smollm3");
}

}  // namespace
}  // namespace okapi::test
