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

// Chooses how many tokens to draft each round from what rounds achieved: for each candidate
// length (none, and powers of two up to --draft-max) a moving average of the tokens a round
// produced per second of drafting, verifying and sampling. The best one is used; a length is
// tried once the next shorter one keeps up with plain decoding, and a neighbour of the best is run
// (or plain decoding) again after 16 rounds, 32 more, 64 more... while the best stays the same, so that the averages
// follow the text at a shrinking cost. Every cost counts, including drafters that stop early or return nothing, so a drafter
// that does not pay ends up not being asked.
class DraftLength {
 public:
  DraftLength(int draft_max, int draft_min);
  // The draft length for the next round, at most `room` (tokens left before the limit or the
  // context's end); 0 means decode without drafting.
  int next(int room);
  // What the round that next() planned achieved: `tokens` emitted in `seconds`.
  void record(int tokens, double seconds);

 private:
  double rate(size_t i) const;   // tokens per second of candidate i (< 0: never run)
  std::vector<int> lengths_;     // the candidates, ascending; 0 first
  std::vector<double> tokens_;   // per candidate: moving averages of a round's tokens
  std::vector<double> seconds_;  // ... and of its seconds
  std::vector<int> samples_;     // ... and the rounds they have seen
  std::vector<int64_t> used_;    // the round each candidate last ran in
  size_t planned_ = 0;           // the candidate next() chose
  int64_t rounds_ = 0;
  size_t best_ = 0;
  int64_t explore_every_ = 16;
  int64_t next_explore_ = 16;
};

}  // namespace okapi::runtime
