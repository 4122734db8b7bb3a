// Speculative decoding: a Drafter proposes the next few tokens cheaply, the target model scores
// them all in one batch, and the standard rejection rule (Leviathan et al. 2023; Chen et al. 2023)
// keeps exactly the tokens plain sampling would produce in distribution: accept a draft x with
// probability min(1, p(x)/q(x)), on rejection draw from normalize(max(0, p - q)), and draw one
// bonus token from the target when every draft passes. p and q are taken after the whole sampler
// chain. Under greedy sampling p is the argmax alone, so a draft is accepted exactly when it is the
// target's argmax: since okapi computes a token's logits bit-identically alone or in a batch, the
// output is then byte-identical to plain decoding.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sample/sampler.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::runtime {

using tokenizer::TokenId;

// One drafted token and the drafter's distribution q it was drawn from (q.items with p set); an
// empty q means the drafter proposes the token with probability 1 (lookup, greedy drafters).
struct DraftToken {
  TokenId id = 0;
  sample::Candidates q;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string_view name() const = 0;
  // Up to `max` tokens to follow `context` (the prompt and every token generated so far; the last
  // one has not been run through the target yet). `target` is the target's sampler in its current
  // state (penalty window included): drafters that sample copy it so that q follows the same
  // chain. May return fewer tokens, or none.
  virtual std::vector<DraftToken> draft(std::span<const TokenId> context, int max, const sample::Sampler& target) = 0;
  // A new generation starts (a new prompt): forget any cached state.
  virtual void reset() {}
};

// The verdict on one drafted token given the target's distribution p (Sampler::distribution):
// accepted, or rejected with the replacement drawn from normalize(max(0, p - q)). Draws its
// uniform numbers from `rng` (the target sampler). Under greedy p (one candidate) no number is
// drawn: the draft passes exactly when it is the argmax.
struct Verdict {
  bool accepted = false;
  TokenId token = 0;  // the draft when accepted, else the replacement
};
Verdict verify_draft(const sample::Candidates& p, const DraftToken& draft, sample::Sampler& rng);

// The probability of `id` in a candidate list with p set (0 when absent).
float probability_of(const sample::Candidates& dist, TokenId id);

// Chooses how many tokens to draft each round from what the last rounds measured: the acceptance
// rate (a moving average) and the cost of a target pass per batch length against a drafted
// token's, so that drafting stops paying no more than a probe's worth when it does not help.
class DraftLength {
 public:
  DraftLength(int draft_max, int draft_min) : max_(draft_max), min_(draft_min) {}
  // The draft length for the next round, at most `room` (tokens left before the limit or the
  // context's end); 0 means decode without drafting.
  int next(int room);
  // What a round measured: `drafted` tokens proposed, `accepted` of them kept, the seconds the
  // drafter took and those of the target's pass over drafted + 1 tokens.
  void record(int drafted, int accepted, double draft_seconds, double target_seconds);

 private:
  double expected_rate(int k) const;  // tokens per second with k drafts, from the estimates
  int max_, min_;
  double acceptance_ = 0.7;       // moving average of the per-token acceptance probability
  double draft_token_seconds_ = -1;  // moving average per drafted token (< 0: not measured)
  std::vector<double> pass_seconds_;  // moving average per batch length (index = length)
  int rounds_ = 0;
  int plain_rounds_ = 0;  // rounds in a row decoded without drafts
};

}  // namespace okapi::runtime
