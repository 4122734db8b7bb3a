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
  // Runs the prompt through the drafter's own state (a draft model's cache) with the target's
  // prompt pass, so that the first draft does not; nothing for drafters without such state.
  virtual void prefill(std::span<const TokenId> /*prompt*/) {}
  // What the latest draft() spent bringing its own state up to the context (a draft model runs
  // the tokens it has not seen): after a stretch without drafting that is many tokens, a cost
  // of the pause rather than of drafting.
  struct CatchUp {
    int tokens = 0;
    double seconds = 0;
  };
  virtual CatchUp last_catch_up() const { return {}; }
};

// The part of the latest draft()'s catch-up beyond what a round that follows a drafting round
// needs (the replacement or bonus token and the last draft: 2 tokens).
double catch_up_after_pause_seconds(const Drafter& drafter);

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

// What one decoding round did, for DraftLength.
struct DraftRound {
  int requested = 0;            // the length next() asked for (0: a plain round)
  int drafted = 0;              // drafts the drafter gave and the target verified
  int accepted = 0;             // of those, accepted
  double draft_seconds = 0;     // spent drafting
  double pause_seconds = 0;     // ... of it, catching up after rounds without drafting
  double verify_seconds = 0;    // spent in the target's pass and in sampling
};

// Chooses how many tokens to draft each round from a model of what rounds cost and yield, fitted
// as they run: the target's pass over n tokens costs a + b(n - 1) seconds, a drafter call asked
// for k tokens c + d k, the drafter gives anything in a fraction y of its calls, and draft i passes,
// given that those before it did, with probability alpha_i (so k drafts yield 1 + alpha_1 +
// alpha_1 alpha_2 + ... tokens). The length with the most tokens per second is used, plain decoding
// (0) included, which a length must beat by 2%. The estimates that the chosen length does not
// refresh are re-measured now and then: plain decoding, two rounds in a row with the second one
// timed (the first runs on cold caches and threads), while drafting; a short draft while decoding
// plainly. Their intervals double while the choice holds, so a drafter that does not pay costs a
// few short rounds, and one that does loses little to the checks.
class DraftLength {
 public:
  DraftLength(int draft_max, int draft_min);
  // The draft length for the next round, at most `room` (tokens left before the limit or the
  // context's end); 0 means decode without drafting.
  int next(int room);
  void record(const DraftRound& round);

  // The model's estimate of tokens per second when drafting k tokens (k = 0: plain decoding);
  // < 0 while it lacks the measurements.
  double expected_rate(int k) const;

 private:
  int best_length(int room) const;
  double expected_rate(int k, double alpha) const;  // alpha < 0: the estimated rates
  bool could_pay(int room) const;  // by kWorthChecking, with every draft accepted
  int min_length_ = 1;
  int max_length_ = 0;
  // t = intercept + slope * x fitted by least squares, each older point weighing `keep` times
  // less: costs drift (the machine warms up over a generation's first rounds; other load comes
  // and goes). Without spread in x the slope is kept and the intercept follows; before any
  // spread the line runs through the origin (all of t per unit of x) or is flat.
  class AgingLine {
   public:
    AgingLine(double keep, bool through_origin) : keep_(keep), through_origin_(through_origin) {}
    void add(double x, double t);
    double at(double x) const { return intercept_ + slope_ * x; }
    double intercept() const { return intercept_; }

   private:
    double keep_;
    bool through_origin_;
    bool fitted_ = false;
    double w_ = 0, x_ = 0, xx_ = 0, t_ = 0, xt_ = 0;
    double intercept_ = 0, slope_ = 0;
  };
  AgingLine pass_;             // the target's pass: a + b * drafts
  AgingLine drafting_;         // the drafter's call: its fixed part + per drafted token
  int plain_samples_ = 0;      // timed plain passes seen
  int draft_samples_ = 0;      // drafting rounds seen
  double yield_ = 1;           // y, a moving average (weight 1/(n+1), at least 0.1, of the newest)
  int yield_samples_ = 0;
  double accepted_ = 0;        // alpha = (accepted_ + prior) / (trials_ + prior), aged by round
  double trials_ = 0;
  std::vector<double> position_accepted_;  // ... and per draft position, aged alike
  std::vector<double> position_trials_;
  double acceptance(size_t position) const;  // the chance that draft `position` (0-based) passes
  int64_t rounds_ = 0;
  int64_t acceptance_round_ = 0;  // the round the acceptance counts were last updated in
  int last_best_ = -1;
  int64_t check_every_ = 0;
  int64_t next_check_ = 0;
  bool plain_again_ = false;  // the next round is the timed one of a pair of plain rounds
  // The next plain pass runs cold (after the prompt's pass or a drafting round): not timed.
  bool cold_ = true;
};

}  // namespace okapi::runtime
