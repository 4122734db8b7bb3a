// The peer-logits harness (support/peer_logits) on architectures that also have committed goldens:
// if these drift, the harness is wrong, not the new architectures it checks.
#include <gtest/gtest.h>

#include "support/paths.hpp"
#include "support/peer_logits.hpp"

namespace okapi::test {
namespace {

class PeerFidelity : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("peer-fidelity"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(PeerFidelity, Qwen3F32BatchAndTokenByTokenBothCaches) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  const auto model = write_synth_model(tiny_preset("qwen3-0.6b"), "", "F32", 2, dir_ / "qwen3.gguf");
  expect_matches_peer_every_cache_and_mode(model, peer_test_prompt());
}

TEST_F(PeerFidelity, Gemma3WindowShorterThanThePromptQ8_0) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  synth::Preset preset = tiny_preset("gemma3-270m");
  preset.sliding_window = 16;
  const auto f32 = write_synth_model(preset, "", "F32", 6, dir_ / "gemma3.gguf");
  PeerCheck check;
  check.max_rel = 3e-3;  // llama.cpp's GELU is an fp16 table, okapi's gemma3 GELU is evaluated in float
  expect_matches_peer(f32, peer_test_prompt(), check);
  const auto q8 = write_synth_model(preset, "", "Q8_0", 6, dir_ / "gemma3-q8.gguf");
  PeerCheck quantized;
  quantized.max_rel = 0;
  quantized.near_tie = 0.12f;
  quantized.min_top1 = 0.95;
  expect_matches_peer(q8, peer_test_prompt(), quantized);
}

}  // namespace
}  // namespace okapi::test
