// Sampling under a token filter (a grammar's mask) draws exactly what the chain draws from logits
// whose refused tokens are -inf (llama.cpp's way of applying a grammar), whichever path finds the
// candidates: checking the best ones one by one, or the whole mask.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "sample/sampler.hpp"

namespace okapi::sample {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(n);
  for (auto& l : logits) l = normal(rng);
  return logits;
}

struct Masked {
  std::vector<uint8_t> mask;
  size_t checks = 0;
  TokenFilter filter() {
    TokenFilter f;
    f.allows = [this](TokenId id) {
      ++checks;
      return mask[static_cast<size_t>(id)] != 0;
    };
    f.mask = [this]() -> const std::vector<uint8_t>& { return mask; };
    return f;
  }
};

std::vector<float> minus_infinity_where_refused(std::vector<float> logits, const std::vector<uint8_t>& mask) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (!mask[i]) logits[i] = -std::numeric_limits<float>::infinity();
  return logits;
}

void expect_same_draws(const SamplerConfig& config, double allowed_fraction, uint32_t seed) {
  const size_t n = 5000;
  std::mt19937 rng(seed);
  std::bernoulli_distribution allow(allowed_fraction);
  Sampler filtered(config), reference(config);
  for (int step = 0; step < 40; ++step) {
    const auto logits = random_logits(n, seed * 100 + static_cast<uint32_t>(step));
    Masked m;
    m.mask.resize(n);
    for (auto& b : m.mask) b = allow(rng) ? 1 : 0;
    m.mask[static_cast<size_t>(step) % n] = 1;  // at least one allowed
    const TokenId got = filtered.sample(logits, m.filter());
    const TokenId want = reference.sample(minus_infinity_where_refused(logits, m.mask));
    ASSERT_EQ(got, want) << "step " << step << " allowed fraction " << allowed_fraction;
    ASSERT_TRUE(m.mask[static_cast<size_t>(got)]);
    filtered.accept(got);
    reference.accept(want);
  }
}

TEST(FilteredSampling, GreedyTakesTheBestAllowedToken) {
  SamplerConfig config;
  config.temperature = 0.0f;
  for (double fraction : {1.0, 0.5, 0.01, 0.0005}) expect_same_draws(config, fraction, 1);
}

TEST(FilteredSampling, DefaultChainDrawsAsWithMinusInfinityLogits) {
  SamplerConfig config;  // top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
  config.seed = 7;
  for (double fraction : {1.0, 0.3, 0.005, 0.0002}) expect_same_draws(config, fraction, 2);
}

TEST(FilteredSampling, WithoutTopKTheWholeMaskIsUsed) {
  SamplerConfig config;
  config.seed = 3;
  config.top_k = 0;
  config.repeat_penalty = 1.3f;
  for (double fraction : {0.9, 0.02}) expect_same_draws(config, fraction, 3);
}

TEST(FilteredSampling, FewChecksWhenTheModelPrefersWhatIsAllowed) {
  SamplerConfig config;
  config.temperature = 0.0f;
  Sampler sampler(config);
  const auto logits = random_logits(100000, 9);
  Masked m;
  m.mask.assign(logits.size(), 1);
  sampler.sample(logits, m.filter());
  EXPECT_LE(m.checks, 1u);
}

TEST(FilteredSampling, NothingAllowedIsAnError) {
  Sampler sampler(SamplerConfig{});
  const auto logits = random_logits(300, 4);
  Masked m;
  m.mask.assign(logits.size(), 0);
  EXPECT_THROW(sampler.sample(logits, m.filter()), Error);
}

}  // namespace
}  // namespace okapi::sample
