// Sampling stages on hand-made distributions, the chain's order, greedy, seeds and penalties.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "sample/sampler.hpp"

namespace okapi::sample {
namespace {

// Logits whose softmax is exactly `probs` (up to rounding).
std::vector<float> logits_of(const std::vector<float>& probs) {
  std::vector<float> out;
  for (float p : probs) out.push_back(std::log(p));
  return out;
}

Candidates from(const std::vector<float>& logits) { return Candidates::from_logits(logits); }

std::vector<TokenId> ids(const Candidates& c) {
  std::vector<TokenId> out;
  for (const auto& t : c.items) out.push_back(t.id);
  return out;
}

TEST(Stages, SoftmaxSortsAndNormalizes) {
  auto c = Candidates::from_logits(logits_of({0.1f, 0.4f, 0.2f, 0.3f}));
  softmax(c);
  EXPECT_EQ(ids(c), (std::vector<TokenId>{1, 3, 2, 0}));
  EXPECT_NEAR(c.items[0].p, 0.4f, 1e-6f);
  EXPECT_NEAR(c.items[3].p, 0.1f, 1e-6f);
}

TEST(Stages, TopK) {
  auto c = from({1.0f, 5.0f, 3.0f, 4.0f, 2.0f});
  top_k(c, 3);
  EXPECT_EQ(ids(c), (std::vector<TokenId>{1, 3, 2}));
  auto all = from({1.0f, 2.0f});
  top_k(all, 0);  // off
  EXPECT_EQ(all.size(), 2u);
  top_k(all, 10);  // more than there are
  EXPECT_EQ(all.size(), 2u);
}

TEST(Stages, TopPKeepsUntilCumulativeReachesP) {
  // Sorted probabilities 0.4 0.3 0.2 0.1: cumulative 0.4 0.7 0.9 1.0.
  auto c = Candidates::from_logits(logits_of({0.1f, 0.4f, 0.2f, 0.3f}));
  top_p(c, 0.7f, 0);
  EXPECT_EQ(ids(c), (std::vector<TokenId>{1, 3}));
  c = Candidates::from_logits(logits_of({0.1f, 0.4f, 0.2f, 0.3f}));
  top_p(c, 0.71f, 0);
  EXPECT_EQ(ids(c), (std::vector<TokenId>{1, 3, 2}));
  c = Candidates::from_logits(logits_of({0.1f, 0.4f, 0.2f, 0.3f}));
  top_p(c, 0.1f, 3);  // min_keep wins
  EXPECT_EQ(c.size(), 3u);
  c = Candidates::from_logits(logits_of({0.1f, 0.4f, 0.2f, 0.3f}));
  top_p(c, 1.0f, 0);  // off
  EXPECT_EQ(c.size(), 4u);
}

TEST(Stages, MinPIsRelativeToTheLargestProbability) {
  // 0.4 is the max: min_p 0.5 keeps p >= 0.2, i.e. 0.4 0.3 0.2.
  auto c = Candidates::from_logits(logits_of({0.1f, 0.4f, 0.2f, 0.3f}));
  min_p(c, 0.5f, 0);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c.items[0].id, 1);  // unsorted path keeps the input order
  c = Candidates::from_logits(logits_of({0.1f, 0.4f, 0.2f, 0.3f}));
  min_p(c, 0.76f, 0);  // keeps p >= 0.304: only 0.4
  EXPECT_EQ(ids(c), (std::vector<TokenId>{1}));
  c = Candidates::from_logits(logits_of({0.1f, 0.4f, 0.2f, 0.3f}));
  min_p(c, 0.76f, 2);  // the sorted path honours min_keep
  EXPECT_EQ(ids(c), (std::vector<TokenId>{1, 3}));
}

TEST(Stages, TypicalKeepsTokensClosestToTheEntropy) {
  // Entropy of (0.5, 0.25, 0.25) is 1.04 nats; -log p: 0.69, 1.39, 1.39 -> shifts 0.35, 0.35, 0.35
  // (ties); use a sharper example: (0.7, 0.2, 0.1) H = 0.80; shifts: 0.44, 0.81, 1.50.
  auto c = Candidates::from_logits(logits_of({0.1f, 0.7f, 0.2f}));
  typical(c, 0.5f, 0);
  EXPECT_EQ(ids(c), (std::vector<TokenId>{1}));
  c = Candidates::from_logits(logits_of({0.1f, 0.7f, 0.2f}));
  typical(c, 0.8f, 0);
  EXPECT_EQ(ids(c), (std::vector<TokenId>{1, 2}));
  c = Candidates::from_logits(logits_of({0.1f, 0.7f, 0.2f}));
  typical(c, 1.0f, 0);
  EXPECT_EQ(c.size(), 3u);
}

TEST(Stages, TemperatureScalesOrKeepsOnlyTheMax) {
  auto c = from({1.0f, 4.0f, -2.0f});
  temperature(c, 0.5f);
  EXPECT_FLOAT_EQ(c.items[1].logit, 8.0f);
  EXPECT_FLOAT_EQ(c.items[2].logit, -4.0f);
  c = from({1.0f, 4.0f, -2.0f});
  temperature(c, 0.0f);
  EXPECT_TRUE(std::isinf(c.items[0].logit));
  EXPECT_FLOAT_EQ(c.items[1].logit, 4.0f);
}

TEST(Stages, PenaltiesDividePositiveMultiplyNegativeAndSubtractCounts) {
  Penalties pen(64, 2.0f, 0.5f, 0.25f);
  pen.accept(0);
  pen.accept(0);
  pen.accept(1);
  auto c = from({4.0f, -1.0f, 3.0f});
  pen.apply(c);
  EXPECT_FLOAT_EQ(c.items[0].logit, 4.0f / 2 - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(c.items[1].logit, -1.0f * 2 - 1 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(c.items[2].logit, 3.0f);  // never seen
}

TEST(Stages, PenaltyWindowForgetsOldTokens) {
  Penalties pen(3, 2.0f, 0.0f, 0.0f);
  for (TokenId t : {5, 6, 7}) pen.accept(t);
  EXPECT_EQ(pen.count(5), 1);
  pen.accept(8);  // 5 leaves the window
  EXPECT_EQ(pen.count(5), 0);
  EXPECT_EQ(pen.count(8), 1);
  pen.accept(8);
  pen.accept(8);  // window 8 8 8
  EXPECT_EQ(pen.count(8), 3);
  EXPECT_EQ(pen.count(6) + pen.count(7), 0);
  Penalties off(0, 2.0f, 0.0f, 0.0f);
  off.accept(1);
  EXPECT_FALSE(off.active());
  EXPECT_EQ(off.count(1), 0);
  Penalties neutral(64, 1.0f, 0.0f, 0.0f);  // llama.cpp's default: a no-op
  EXPECT_FALSE(neutral.active());
}

TEST(Sampler, GreedyEqualsArgmax) {
  SamplerConfig cfg;
  cfg.temperature = 0.0f;
  Sampler s(cfg);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(1000);
    for (auto& x : logits) x = normal(gen);
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    EXPECT_EQ(s.sample(logits), static_cast<TokenId>(best));
  }
}

TEST(Sampler, GreedyHonoursPenalties) {
  SamplerConfig cfg;
  cfg.temperature = -1.0f;
  cfg.repeat_penalty = 4.0f;
  Sampler s(cfg);
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(1);  // 3 / 4 < 2
  EXPECT_EQ(s.sample(logits), 2);
  s.reset();
  EXPECT_EQ(s.sample(logits), 1);
}

std::vector<TokenId> run(uint32_t seed, int n) {
  SamplerConfig cfg;
  cfg.seed = seed;
  cfg.temperature = 1.5f;
  cfg.top_k = 0;
  cfg.top_p = 1.0f;
  cfg.min_p = 0.0f;
  Sampler s(cfg);
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits));
  return out;
}

TEST(Sampler, DeterministicBySeed) {
  EXPECT_EQ(run(42, 100), run(42, 100));
  EXPECT_NE(run(42, 100), run(43, 100));
  SamplerConfig cfg;
  cfg.seed = 5;
  Sampler s(cfg);
  std::vector<float> logits = {0.0f, 0.1f, 0.2f, 0.3f};
  std::vector<TokenId> first, second;
  for (int i = 0; i < 30; ++i) first.push_back(s.sample(logits));
  s.reset();  // restarts the stream
  for (int i = 0; i < 30; ++i) second.push_back(s.sample(logits));
  EXPECT_EQ(first, second);
}

TEST(Sampler, DrawsFollowTheDistribution) {
  SamplerConfig cfg;
  cfg.seed = 1;
  cfg.temperature = 1.0f;
  cfg.top_k = 0;
  cfg.top_p = 1.0f;
  cfg.min_p = 0.0f;
  Sampler s(cfg);
  const auto logits = logits_of({0.1f, 0.6f, 0.3f});
  std::vector<int> counts(3);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(logits))];
  EXPECT_NEAR(counts[0] / double(n), 0.1, 0.015);
  EXPECT_NEAR(counts[1] / double(n), 0.6, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 0.3, 0.015);
}

// The draw is llama_sampler_dist's: std::discrete_distribution over the sorted probabilities
// with std::mt19937(seed).
TEST(Sampler, DrawMatchesLlamaCppConstruction) {
  SamplerConfig cfg;
  cfg.seed = 1234;
  cfg.temperature = 1.0f;
  cfg.top_k = 0;
  cfg.top_p = 1.0f;
  cfg.min_p = 0.0f;
  Sampler s(cfg);
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f};  // sorted: ids 1 3 0 2
  auto c = Candidates::from_logits(logits);
  softmax(c);
  std::vector<double> probs;
  for (const auto& t : c.items) probs.push_back(t.p);
  std::mt19937 rng(1234);
  for (int i = 0; i < 50; ++i) {
    std::discrete_distribution<int> dist(probs.begin(), probs.end());
    EXPECT_EQ(s.sample(logits), c.items[static_cast<size_t>(dist(rng))].id);
  }
}

// The chain runs top_k before top_p before min_p before temperature: with temperature applied
// last, a high temperature cannot bring back tokens the truncations removed.
TEST(Sampler, ChainOrderTruncatesBeforeTemperature) {
  SamplerConfig cfg;
  cfg.seed = 3;
  cfg.temperature = 100.0f;  // flattens what survives
  cfg.top_k = 2;
  cfg.top_p = 1.0f;
  cfg.min_p = 0.0f;
  Sampler s(cfg);
  const std::vector<float> logits = {0.0f, 5.0f, 4.0f, 3.0f};
  for (int i = 0; i < 200; ++i) {
    const TokenId t = s.sample(logits);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  // min_p measured before temperature: 0.05 of p_max removes ids 0 and 3 (e^-5, e^-2 / ...).
  cfg.top_k = 0;
  cfg.min_p = 0.2f;
  Sampler m(cfg);
  for (int i = 0; i < 200; ++i) {
    const TokenId t = m.sample(logits);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

TEST(Sampler, ConfigDefaultsAndValidation) {
  const SamplerConfig cfg;
  EXPECT_EQ(cfg.repeat_last_n, 64);
  EXPECT_EQ(cfg.top_k, 40);
  EXPECT_FLOAT_EQ(cfg.top_p, 0.95f);
  EXPECT_FLOAT_EQ(cfg.min_p, 0.05f);
  EXPECT_FLOAT_EQ(cfg.temperature, 0.8f);
  EXPECT_NE(cfg.describe().find("top_k = 40"), std::string::npos);
  EXPECT_NE(cfg.describe_chain().find("top-k -> typical -> top-p -> min-p -> temp -> dist"), std::string::npos);
  SamplerConfig bad;
  bad.repeat_last_n = -2;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = SamplerConfig{};
  bad.min_p = 2.0f;
  EXPECT_THROW(Sampler{bad}, Error);
  SamplerConfig ok;
  Sampler s(ok);
  EXPECT_THROW(s.sample({}), Error);
}

}  // namespace
}  // namespace okapi::sample
