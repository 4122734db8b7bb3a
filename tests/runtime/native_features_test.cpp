// What llama-server's native API needs of the generation loop: a context shift goes on past a
// full context (and keeps the tokens it should), the reserve stops one token earlier, logit
// biases ban tokens, post-sampling probabilities come from the sampler's candidates, a request
// can name its slot and skip the cached prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/engine.hpp"
#include "runtime/scheduler.hpp"
#include "support/paths.hpp"

namespace okapi::runtime {
namespace {

const std::filesystem::path kModel = test::repo_dir() / "models" / "stories260K.gguf";

class NativeFeatures : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.threads = 2;
    engine_ = Engine::load(kModel, options);
  }
  Scheduler make(int slots, int64_t n_ctx) {
    SchedulerOptions o;
    o.n_slots = slots;
    o.n_ctx_per_slot = n_ctx;
    o.batch_size = 16;
    o.worker_thread = false;
    return Scheduler(*engine_, o);
  }
  SequenceRequest request(int64_t max_tokens) {
    SequenceRequest r;
    r.prompt = tokenize_prompt(engine_->tokenizer(), "Once upon a time");
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(NativeFeatures, ReserveStopsOneTokenBeforeTheEnd) {
  auto scheduler = make(1, 32);
  SequenceRequest r = request(-1);
  r.context_reserve = 1;
  const GenerationResult g = generate(scheduler, r);
  EXPECT_EQ(g.stop, StopReason::ContextFull);
  // llama-server: the prompt and the generated tokens fill all 32 cells but the last token's.
  EXPECT_EQ(g.stats.prompt_tokens + g.stats.generated_tokens, 32);
}

TEST_F(NativeFeatures, ContextShiftGoesOnPastAFullContextAndMatchesARerunOfTheKeptTokens) {
  auto scheduler = make(1, 32);
  SequenceRequest r = request(60);
  r.context_reserve = 1;
  r.context_shift = true;
  r.shift_keep = 1;  // the BOS
  const GenerationResult g = generate(scheduler, r);
  EXPECT_EQ(g.stop, StopReason::TokenLimit);
  EXPECT_EQ(g.stats.generated_tokens, 60);
  EXPECT_GT(g.stats.shifted_out, 0);
  EXPECT_LT(g.stats.cache_tokens, 32);
  // The first shift happens when 31 cells are used: the tokens generated before it are those of
  // a run without shifting.
  auto plain = make(1, 32);
  SequenceRequest p = request(-1);
  p.context_reserve = 1;
  const GenerationResult unshifted = generate(plain, p);
  ASSERT_LE(unshifted.tokens.size(), g.tokens.size());
  EXPECT_TRUE(std::equal(unshifted.tokens.begin(), unshifted.tokens.end(), g.tokens.begin()));
}

TEST_F(NativeFeatures, LogitBiasBansTokensAndBanningAllIsAnError) {
  auto scheduler = make(1, 64);
  const GenerationResult free_run = generate(scheduler, request(8));
  SequenceRequest banned = request(8);
  for (const TokenId id : free_run.tokens)
    banned.sampling.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
  const GenerationResult g = generate(scheduler, banned);
  for (const TokenId id : g.tokens)
    EXPECT_EQ(std::find(free_run.tokens.begin(), free_run.tokens.end(), id), free_run.tokens.end()) << id;
  SequenceRequest all = request(4);
  for (TokenId id = 0; id < engine_->model().n_vocab(); ++id)
    all.sampling.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
  EXPECT_THROW(generate(scheduler, all), Error);
}

TEST_F(NativeFeatures, PostSamplingProbabilitiesAreTheSamplersCandidates) {
  auto scheduler = make(1, 64);
  SequenceRequest r = request(5);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  r.top_logprobs = 10;
  r.post_sampling_probs = true;
  std::vector<TokenLogprob> probs;
  generate(scheduler, r, [&](const SequenceEvent& e) {
    for (const auto& lp : e.logprobs) probs.push_back(lp);
  });
  ASSERT_EQ(probs.size(), 5u);
  for (const auto& lp : probs) {
    ASSERT_EQ(lp.top.size(), lp.top_ids.size());
    ASSERT_FALSE(lp.top.empty());
    double sum = 0;
    for (const auto& [text, logprob] : lp.top) {
      EXPECT_TRUE(std::isfinite(logprob));
      sum += std::exp(logprob);
    }
    EXPECT_LE(sum, 1.0 + 1e-4);
    // Fewer than asked only when the candidates are all there (their probabilities sum to 1).
    if (lp.top.size() < 10) {
      EXPECT_NEAR(sum, 1.0, 1e-4);
    }
    EXPECT_NE(std::find(lp.top_ids.begin(), lp.top_ids.end(), lp.id), lp.top_ids.end());
  }
}

TEST_F(NativeFeatures, NamedSlotAndNoCacheReuse) {
  auto scheduler = make(2, 64);
  SequenceRequest first = request(4);
  first.slot = 1;
  EXPECT_EQ(generate(scheduler, first).stats.slot, 1);
  SequenceRequest again = request(4);
  again.slot = 1;
  EXPECT_GT(generate(scheduler, again).stats.cached_tokens, 0);
  SequenceRequest fresh = request(4);
  fresh.slot = 1;
  fresh.reuse_cache = false;
  EXPECT_EQ(generate(scheduler, fresh).stats.cached_tokens, 0);
  SequenceRequest missing = request(4);
  missing.slot = 2;
  EXPECT_THROW(scheduler.submit(missing), Error);
}

}  // namespace
}  // namespace okapi::runtime
