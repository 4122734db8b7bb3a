// gpt-oss against llama.cpp (llama-dump-logits) on a tiny synth model that exercises every feature:
// a window (8) shorter than the prompt on the even layers, full attention on the odd ones, sinks
// spread wide enough that some heads' sinks dominate and others vanish, 3 of 8 experts per token
// (softmax over the chosen logits), expert gate / up weights 4x the usual spread so that the
// SwiGLU clamp (limit 7) bites on a good share of the values, biases everywhere, YaRN rope.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "synth/synth.hpp"

namespace okapi::test {
namespace {

synth::Preset tiny_gpt_oss() {
  synth::Preset p = tiny_preset("gpt-oss-20b");
  p.sliding_window = 8;
  p.n_expert = 8;
  p.n_expert_used = 3;
  p.n_ff_exp = 64;
  p.n_ff = 64;
  p.expert_gain = 4.0f;
  return p;
}

class GptOss : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("gpt-oss"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// With an f16 cache the two engines round K and V (and llama.cpp q) differently, by ~1e-3 of a
// logit; a router whose top-k has a near tie then picks another expert in one engine only, and that
// token's logits (and its neighbours', through attention) move by much more. Measured: llama.cpp's
// own f16 run leaves its f32 run by 0.53 at one position of 275 and by up to 2e-2 at the next few,
// while okapi's f16 run stays within 4e-3 of llama.cpp's f32 run everywhere. So for f16 the rows are
// checked by share: almost all close, the argmax everywhere.
void expect_mostly_matches_peer(const std::filesystem::path& model, const std::string& kv, bool token_by_token) {
  const PeerLogits peer = peer_logits(model, peer_test_prompt(), kv);
  const std::vector<float> mine = okapi_logits(model, peer.tokens, kv, token_by_token ? 1 : 512);
  ASSERT_EQ(mine.size(), peer.logits.size());
  const auto n = static_cast<size_t>(peer.n_vocab);
  int64_t close = 0;
  for (size_t t = 0; t < peer.tokens.size(); ++t) {
    PeerLogits row{{peer.tokens[t]}, peer.n_vocab, {peer.logits.begin() + t * n, peer.logits.begin() + (t + 1) * n}};
    const std::vector<float> got(mine.begin() + t * n, mine.begin() + (t + 1) * n);
    close += compare_logits(row, got, 0.0f).max_rel <= 5e-3;
  }
  const PeerComparison c = compare_logits(peer, mine, 0.0f);
  std::printf("  %-40s kv %-3s %-14s %3lld tokens: max rel %.3g  rows within 5e-3: %lld  top1 %lld/%lld\n",
              model.filename().string().c_str(), kv.c_str(), token_by_token ? "token-by-token" : "batch",
              static_cast<long long>(c.positions), c.max_rel, static_cast<long long>(close),
              static_cast<long long>(c.top1_agree), static_cast<long long>(c.positions));
  EXPECT_GE(static_cast<double>(close), 0.95 * static_cast<double>(c.positions));
  EXPECT_EQ(c.top1_agree, c.positions);
}

TEST_F(GptOss, F32MatchesLlamaCppBatchAndTokenByToken) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  const auto model = write_synth_model(tiny_gpt_oss(), "", "F32", 4, dir_ / "gpt-oss.gguf");
  for (bool one_by_one : {false, true}) {
    PeerCheck check;
    check.token_by_token = one_by_one;
    expect_matches_peer(model, peer_test_prompt(), check);
  }
}

TEST_F(GptOss, F32WithF16CacheMatchesLlamaCppBarRoutingFlips) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  const auto model = write_synth_model(tiny_gpt_oss(), "", "F32", 4, dir_ / "gpt-oss.gguf");
  for (bool one_by_one : {false, true}) expect_mostly_matches_peer(model, "f16", one_by_one);
}

TEST_F(GptOss, Q8_0MatchesLlamaCppUpToNearTies) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  const auto model = write_synth_model(tiny_gpt_oss(), "", "Q8_0", 4, dir_ / "gpt-oss-q8.gguf");
  PeerCheck check;
  check.max_rel = 0;
  check.near_tie = 0.12f;
  check.min_top1 = 0.95;
  expect_matches_peer(model, peer_test_prompt(), check);
}

}  // namespace
}  // namespace okapi::test
