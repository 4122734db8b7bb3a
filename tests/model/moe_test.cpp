// Mixture-of-experts architectures (qwen3moe, qwen2moe, Mixtral = llama with experts) against
// llama.cpp's logits on tiny shrunk presets (8 experts, top-k below the count, qwen2moe's gated
// shared expert): F32 weights with f32 and f16 caches, in one batch and token by token, and one
// quantized type per architecture with the near-tie rule. Plus the batch invariance the server
// and speculative decoding rely on: a token's logits are the same bits whether its sequence runs
// alone or beside others (its experts' matmuls then hold other tokens' rows too).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "backend/cpu_ops.hpp"
#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "model/evaluate.hpp"
#include "model/model.hpp"
#include "support/cache_types.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"

namespace okapi::test {
namespace {

// The preset shrunk by tiny_preset, with 8 experts of width 32 (Mixtral: n_ff), top-k 4 for
// qwen3moe and 2 for the others, and a shared expert of 80 for qwen2moe.
synth::Preset tiny_moe(std::string_view name) {
  synth::Preset p = tiny_preset(name);
  p.n_expert = 8;
  p.n_expert_used = p.archs.front() == "qwen3moe" ? 4 : 2;
  if (p.n_ff_exp > 0) p.n_ff_exp = 32;
  if (p.n_ff_shexp > 0) p.n_ff_shexp = 80;
  return p;
}

class MoeFidelity : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("moe-fidelity"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // F32 with both caches, batch and token by token; then `quantized` with the near-tie rule.
  void check(std::string_view preset, const std::string& quantized) {
    OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
    const synth::Preset p = tiny_moe(preset);
    const std::string stem(preset);
    const auto f32 = write_synth_model(p, "", "F32", 3, dir_ / (stem + ".gguf"));
    expect_matches_peer_every_cache_and_mode(f32, peer_test_prompt());
    const auto q = write_synth_model(p, "", quantized, 3, dir_ / (stem + "-" + quantized + ".gguf"));
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

TEST_F(MoeFidelity, Qwen3Moe) { check("qwen3-30b-a3b", "Q8_0"); }
TEST_F(MoeFidelity, Qwen2MoeSharedExpert) { check("qwen2-57b-a14b", "Q4_K_M"); }
TEST_F(MoeFidelity, Mixtral) { check("mixtral-8x7b", "Q4_K_M"); }

// Two prompts prefilled in one forward_sequences pass, then a decode step of both, against each
// sequence alone through forward(): memcmp-equal logits at every position.
TEST(MoeBatchInvariance, SequencesAloneAndTogetherGiveTheSameBits) {
  const std::filesystem::path dir = make_temp_dir("moe-batch");
  ThreadPool pool(2);
  for (const char* preset : {"qwen3-30b-a3b", "qwen2-57b-a14b", "mixtral-8x7b"}) {
    const auto path = write_synth_model(tiny_moe(preset), "", "Q8_0", 2, dir / (std::string(preset) + ".gguf"));
    const auto m = model::Model::load(gguf::File::open(path));
    backend::CpuOps ops(&pool);
    ops.prepare(m->weights());
    const model::HParams& hp = m->hparams();
    const kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, 64};
    const model::KvTypes types{cache_types("f32", "f32"), kv::ExactScores::Direct};
    std::vector<std::vector<int32_t>> seqs = {{}, {}};
    for (int i = 0; i < 21; ++i) seqs[0].push_back((i * 37 + 11) % 500);
    for (int i = 0; i < 14; ++i) seqs[1].push_back((i * 53 + 7) % 500);
    // Alone: each sequence through forward(), all but its last token in one batch, then the last.
    std::vector<std::vector<float>> alone;
    for (const auto& s : seqs) {
      auto kv = ops.make_kv(shape, types);
      const auto n = static_cast<int32_t>(s.size());
      alone.push_back(model::evaluate_all(*m, ops, *kv, std::span(s).first(s.size() - 1), 512));
      const std::vector<float> last = model::evaluate_all(*m, ops, *kv, std::span(s).last(1), 512, n - 1);
      alone.back().insert(alone.back().end(), last.begin(), last.end());
    }
    // Together: all but the last token of each in one pass, then the last tokens in one pass.
    auto a = ops.make_kv(shape, types), b = ops.make_kv(shape, types);
    kv::KvStore* store_of[] = {a.get(), b.get()};
    std::vector<std::vector<float>> together(2);
    for (const bool last : {false, true}) {
      std::vector<kv::KvStore*> stores;
      std::vector<int32_t> tokens, positions;
      for (size_t s = 0; s < 2; ++s) {
        const auto n = static_cast<int32_t>(seqs[s].size());
        for (int32_t p = last ? n - 1 : 0; p < (last ? n : n - 1); ++p) {
          stores.push_back(store_of[s]);
          tokens.push_back(seqs[s][static_cast<size_t>(p)]);
          positions.push_back(p);
        }
      }
      const std::vector<uint8_t> want(tokens.size(), 1);
      std::vector<float> logits(tokens.size() * static_cast<size_t>(hp.n_vocab));
      m->forward_sequences(ops, stores, tokens, positions, want, logits.data());
      for (size_t t = 0; t < tokens.size(); ++t) {
        const size_t s = stores[t] == a.get() ? 0 : 1;
        const float* row = logits.data() + t * static_cast<size_t>(hp.n_vocab);
        together[s].insert(together[s].end(), row, row + hp.n_vocab);
      }
    }
    for (size_t s = 0; s < 2; ++s) {
      ASSERT_EQ(together[s].size(), alone[s].size()) << preset;
      EXPECT_EQ(std::memcmp(together[s].data(), alone[s].data(), alone[s].size() * sizeof(float)), 0)
          << preset << " sequence " << s;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace okapi::test
