// gemma2 against llama.cpp (../shared/peers/llama-dump-logits) on tiny synth models of gemma2-2b's
// shape: sliding windows much shorter than the prompt (even layers local), attention and final
// soft-caps small enough that tanh saturates, F32 weights with f32 and f16 caches in one batch and
// token by token, and Q8_0 weights with the near-tie rule.
#include <gtest/gtest.h>

#include "support/paths.hpp"
#include "support/peer_logits.hpp"

namespace okapi::test {
namespace {

class Gemma2Fidelity : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("gemma2-fidelity"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// Windows of 8 over a prompt of 275 tokens; caps of 2 (scores) and 3 (logits) that bite. Two layers
// (one local, one global) for F32: llama.cpp's fp16 GELU table turns last-bit differences of the
// pre-activations into fp16 steps, which each layer amplifies (4 layers: 5e-4 f32, 1.1e-3 f16).
// Token by token okapi's cache is a ring of 256 cells for the local layer, so it wraps.
synth::Preset biting_gemma2() {
  synth::Preset p = tiny_preset("gemma2-2b");
  p.sliding_window = 8;
  p.attn_softcap = 2.0f;
  p.final_softcap = 3.0f;
  return p;
}

TEST_F(Gemma2Fidelity, F32BatchAndTokenByTokenBothCaches) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  const auto model = write_synth_model(biting_gemma2(), "", "F32", 2, dir_ / "gemma2.gguf");
  expect_matches_peer_every_cache_and_mode(model, peer_test_prompt());
}

TEST_F(Gemma2Fidelity, Q8_0NearTies) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  const auto model = write_synth_model(biting_gemma2(), "", "Q8_0", 4, dir_ / "gemma2-q8.gguf");
  PeerCheck check;
  check.max_rel = 0;
  check.near_tie = 0.12f;
  check.min_top1 = 0.95;
  expect_matches_peer(model, peer_test_prompt(), check);
}

}  // namespace
}  // namespace okapi::test
