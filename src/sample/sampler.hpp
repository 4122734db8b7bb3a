// The sampler chain of llama.cpp's common_sampler (common/sampling.cpp, c392e509) with its
// defaults (common_params_sampling): penalties -> top_k -> typical -> top_p -> min_p ->
// temperature -> dist(seed). DRY and XTC are not implemented (off by default upstream).
// temp <= 0 is greedy: the argmax of the penalized logits.
//
// Seeded streams: the RNG is std::mt19937 seeded with `seed` and a draw is one
// std::discrete_distribution<int> over the sorted candidate probabilities, as llama_sampler_dist
// does, with probabilities computed in float in the same order. Built with the same standard
// library (libstdc++), okapi therefore picks the same tokens as llama.cpp for the same logits and
// seed, except where logits tie (llama.cpp's sort leaves the order of equal logits unspecified;
// okapi orders them by id).
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sample/stages.hpp"

namespace okapi::sample {

// llama.cpp's LLAMA_DEFAULT_SEED: draw a random seed.
inline constexpr uint32_t kRandomSeed = 0xFFFFFFFF;

struct SamplerConfig {
  uint32_t seed = kRandomSeed;
  int32_t repeat_last_n = 64;   // penalty window; 0 disables, -1 unbounded
  float repeat_penalty = 1.0f;  // 1 = off
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t top_k = 40;           // <= 0: off
  float typical_p = 1.0f;       // 1 = off
  float top_p = 0.95f;          // 1 = off
  float min_p = 0.05f;          // 0 = off
  float temperature = 0.8f;     // <= 0: greedy
  int32_t min_keep = 0;         // candidates every truncating stage keeps at least
  // Added to a token's logit before the chain (llama.cpp's logit-bias sampler, first in its
  // chain); -infinity bans the token. A token may appear more than once: the biases add up.
  std::vector<std::pair<TokenId, float>> logit_bias;

  bool greedy() const { return temperature <= 0.0f; }
  // Throws okapi::Error naming the field for values llama.cpp would not accept.
  void validate() const;
  // "repeat_last_n = 64, repeat_penalty = 1.000, ..." as llama.cpp prints its sampler params.
  std::string describe() const;
  // "penalties -> top-k -> ... -> dist", or "... -> greedy".
  std::string describe_chain() const;
};

// `seed`, or a random one for kRandomSeed (what a Sampler of that seed uses).
uint32_t resolve_seed(uint32_t seed);

// Which tokens a constraint (a grammar) allows next. `allows` checks one token; `mask` gives the
// whole vocabulary's (1 = allowed) when checking the best candidates one by one is not enough.
struct TokenFilter {
  std::function<bool(TokenId)> allows;
  std::function<const std::vector<uint8_t>&()> mask;
};

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);

  // Picks the next token from one row of logits (one per vocabulary entry). Does not accept it.
  TokenId sample(std::span<const float> logits);
  // The same draw with every token the filter refuses removed before the chain (as llama.cpp's
  // grammar sets their logits to -inf): greedy takes the best allowed token, top-k the k best
  // allowed ones. Only as many candidates as the chain keeps are checked one by one, so a constraint
  // costs little when the model already prefers what it allows. Throws okapi::Error when the filter
  // allows no token at all.
  TokenId sample(std::span<const float> logits, const TokenFilter& filter);
  // Records a token of the sequence (prompt or generated) for the penalties.
  void accept(TokenId token);
  // Forgets accepted tokens and restarts the RNG from the seed.
  void reset();

  // The distribution sample() draws from: the candidates left after the whole chain (penalties,
  // truncations, temperature) with their probabilities p, sorted by descending logit; greedy: the
  // argmax alone with p = 1. Speculative decoding verifies drafts against it.
  Candidates distribution(std::span<const float> logits) const;
  // One draw from a distribution() (or any candidate list with p set), as sample() draws.
  TokenId draw_from(const Candidates& dist);
  // Restarts the RNG from `seed` (the penalty window stays): a copy of a sampler with its own stream.
  void reseed(uint32_t seed);
  // A uniform number in [0, 1) from the sampler's RNG stream (speculative acceptance tests).
  double uniform();

  const SamplerConfig& config() const { return config_; }
  uint32_t seed() const { return seed_; }  // the seed in use (drawn when config.seed is random)

 private:
  // The logits as candidates, with config_.logit_bias added.
  Candidates biased(std::span<const float> logits) const;
  // The candidates after penalties and, unless greedy, the truncations and temperature.
  Candidates chain(std::span<const float> logits) const;
  // The stages after penalties on `c` (unless greedy).
  void truncate_and_scale(Candidates& c) const;
  SamplerConfig config_;
  uint32_t seed_;
  std::mt19937 rng_;
  Penalties penalties_;
};

}  // namespace okapi::sample
