#include "runtime/speculative.hpp"

#include <algorithm>
#include <cmath>

namespace okapi::runtime {

float probability_of(const sample::Candidates& dist, TokenId id) {
  for (const auto& c : dist.items) {
    if (c.id == id) return c.p;
  }
  return 0.0f;
}

double catch_up_after_pause_seconds(const Drafter& drafter) {
  const Drafter::CatchUp c = drafter.last_catch_up();
  constexpr int kRoundTokens = 2;
  return c.tokens > kRoundTokens ? c.seconds * (c.tokens - kRoundTokens) / c.tokens : 0.0;
}

Verdict verify_draft(const sample::Candidates& p, const DraftToken& draft, sample::Sampler& rng) {
  const float p_x = probability_of(p, draft.id);
  if (p.items.size() == 1) return {p.items.front().id == draft.id, p.items.front().id};  // greedy: no draw
  const float q_x = draft.q.items.empty() ? 1.0f : probability_of(draft.q, draft.id);
  // q_x > 0 always holds for a drawn token; a drafter that broke that is treated as q_x = 1.
  const double ratio = q_x > 0.0f ? static_cast<double>(p_x) / q_x : static_cast<double>(p_x);
  if (rng.uniform() < ratio) return {true, draft.id};
  // Rejected: the residual max(0, p - q) over p's support (it is 0 where p is).
  sample::Candidates residual;
  residual.sorted = p.sorted;
  double total = 0;
  for (const auto& c : p.items) {
    const float q_c = draft.q.items.empty() ? (c.id == draft.id ? 1.0f : 0.0f) : probability_of(draft.q, c.id);
    const float r = std::max(0.0f, c.p - q_c);
    if (r > 0.0f) {
      residual.items.push_back({c.id, c.logit, r});
      total += r;
    }
  }
  // p == q to the last bit leaves nothing (and nothing would be rejected then but by rounding):
  // draw from p itself, which is then the same distribution.
  if (residual.items.empty() || !(total > 0)) return {false, rng.draw_from(p)};
  return {false, rng.draw_from(residual)};
}

namespace {
constexpr double kWeight = 0.1;         // of the newest round in the moving averages, at the least
constexpr double kAcceptanceKeep = 0.93;  // of the acceptance counts per round
// A prior on the acceptance rate, 1 in 2, that does not age: one lucky or unlucky round after a
// long pause does not swing the estimate to 0 or 1.
constexpr double kPriorAccepted = 0.5;
constexpr double kPriorTrials = 1;
constexpr double kPositionPrior = 2;  // trials' worth of the pooled rate in each position's estimate
constexpr double kDraftMargin = 1.02;   // the predicted gain drafting needs over plain decoding
constexpr double kCostKeep = 0.8;       // of the cost fits' sums per round
constexpr double kLeastSpread = 0.05;   // variance of the drafts per pass needed to fit the slope
constexpr int64_t kFirstCheck = 16;     // rounds to the first check of the estimates not in use
constexpr int64_t kLastCheck = 128;     // the longest interval between checks
// A drafter that could not beat plain decoding by this much even with every draft accepted is
// checked only every kLastCheck rounds: a check costs a draft call and the draft model's catch-up
// on the tokens since the last one, more than such a drafter could win back soon.
constexpr double kWorthChecking = 1.2;

void average(double& value, int& samples, double newest) {
  const double w = std::max(kWeight, 1.0 / (samples + 1));
  value += w * (newest - value);
  ++samples;
}
}  // namespace

DraftLength::DraftLength(int draft_max, int draft_min)
    : min_length_(std::max(1, draft_min)),
      max_length_(draft_max),
      pass_(kCostKeep, false),
      drafting_(kCostKeep, true) {}

double DraftLength::acceptance(size_t position) const {
  // Each position's own counts, drawn toward the rate over all positions where they are few (and
  // that toward the prior): later drafts, made from the drafter's own guesses, pass less often.
  const double pooled = (accepted_ + kPriorAccepted) / (trials_ + kPriorTrials);
  if (position >= position_trials_.size()) return pooled;
  return (position_accepted_[position] + kPositionPrior * pooled) / (position_trials_[position] + kPositionPrior);
}

double DraftLength::expected_rate(int k) const { return expected_rate(k, -1.0); }

double DraftLength::expected_rate(int k, double alpha) const {
  if (plain_samples_ == 0) return -1;
  if (k == 0) return 1.0 / std::max(1e-9, pass_.intercept());
  if (draft_samples_ == 0) return -1;
  // Tokens a round yields when the drafter proposes k: the first is certain, each further one
  // needs every draft before it. When it proposes nothing the round is a plain one.
  double with_drafts = 1, reach = 1;
  for (int i = 0; i < k; ++i) {
    reach *= alpha >= 0 ? alpha : acceptance(static_cast<size_t>(i));
    with_drafts += reach;
  }
  const double tokens = (1 - yield_) + yield_ * with_drafts;
  const double seconds = drafting_.at(k) + pass_.at(yield_ * k);
  return tokens / seconds;
}

int DraftLength::best_length(int room) const {
  int best = 0;
  double best_rate = -1;
  // At most twice the longest draft seen so far: a few lucky early rounds would otherwise send the
  // length to --draft-max on the strength of positions never tried.
  const int longest = std::max(min_length_, 2 * static_cast<int>(position_trials_.size()));
  for (int k = min_length_; k <= std::min({max_length_, room, longest}); ++k) {
    const double r = expected_rate(k);
    if (r > best_rate) best = k, best_rate = r;
  }
  // Drafting must beat plain decoding by a margin: the model leaves costs out (the drafter's
  // bookkeeping, cache rollback), and a drafter that barely pays is not worth the risk.
  return best_rate > kDraftMargin * expected_rate(0) ? best : 0;
}

bool DraftLength::could_pay(int room) const {
  for (int k = min_length_; k <= std::min(max_length_, room); ++k)
    if (expected_rate(k, 1.0) > kWorthChecking * expected_rate(0)) return true;
  return false;
}

int DraftLength::next(int room) {
  ++rounds_;
  room = std::max(room, 0);
  if (room < min_length_ || max_length_ < min_length_) return 0;
  // Plain decoding is measured first, then drafting. Plain decoding is always measured by two
  // plain rounds, the first of which runs cold (record() does not time it).
  if (plain_again_ || plain_samples_ == 0) {
    plain_again_ = !plain_again_;
    return 0;
  }
  const int first_draft = std::min({min_length_, max_length_, room});
  if (draft_samples_ < 1) return first_draft;
  const int best = best_length(room);
  // A drafter too slow to pay well even if every draft were accepted is checked rarely: its checks
  // cost more than acceptance can make up (a draft model catches up on every token since).
  const auto hopeless = [&] { return best == 0 && !could_pay(room); };
  if (last_best_ < 0 || (best == 0) != (last_best_ == 0)) {
    // A new choice: check what it leaves unmeasured soon, then less and less often.
    check_every_ = hopeless() ? kLastCheck : kFirstCheck;
    next_check_ = rounds_ + check_every_;
  }
  last_best_ = best;
  if (rounds_ < next_check_) return best;
  check_every_ = hopeless() ? kLastCheck : std::min(check_every_ * 2, kLastCheck);
  next_check_ = rounds_ + check_every_;
  if (best == 0) return first_draft;
  plain_again_ = true;
  return 0;
}

void DraftLength::AgingLine::add(double x, double t) {
  w_ = keep_ * w_ + 1;
  x_ = keep_ * x_ + x;
  xx_ = keep_ * xx_ + x * x;
  t_ = keep_ * t_ + t;
  xt_ = keep_ * xt_ + x * t;
  const double mean_x = x_ / w_, mean_t = t_ / w_;
  const double var_x = xx_ / w_ - mean_x * mean_x;
  if (var_x > kLeastSpread) {
    slope_ = std::max(0.0, (xt_ / w_ - mean_x * mean_t) / var_x);
    fitted_ = true;
  } else if (!fitted_ && through_origin_ && mean_x > 0) {
    slope_ = mean_t / mean_x;
  }
  intercept_ = std::max(0.0, mean_t - slope_ * mean_x);
}

void DraftLength::record(const DraftRound& round) {
  if (round.requested <= 0) {
    if (!cold_ && round.verify_seconds > 0) ++plain_samples_, pass_.add(0, round.verify_seconds);
    cold_ = false;
    return;
  }
  cold_ = true;
  ++draft_samples_;
  drafting_.add(round.requested, std::max(0.0, round.draft_seconds - round.pause_seconds));
  average(yield_, yield_samples_, static_cast<double>(round.drafted) / round.requested);
  if (round.drafted <= 0) return;
  pass_.add(round.drafted, round.verify_seconds);
  // Evidence ages with every round, drafted or not: after a stretch of plain decoding one
  // check's drafts outweigh what was seen before it. Trials are the accepted drafts plus the
  // rejected one, if any (a round that took every draft says only that the next would have had
  // its own chance).
  const double keep = std::pow(kAcceptanceKeep, static_cast<double>(rounds_ - acceptance_round_));
  acceptance_round_ = rounds_;
  accepted_ = keep * accepted_ + round.accepted;
  trials_ = keep * trials_ + round.accepted + (round.accepted < round.drafted ? 1 : 0);
  // Per position: drafts 0..accepted-1 passed, draft `accepted` (if any) failed, later ones were
  // never tried.
  const auto tried = static_cast<size_t>(std::min(round.accepted + 1, round.drafted));
  if (position_trials_.size() < tried) position_trials_.resize(tried, 0.0), position_accepted_.resize(tried, 0.0);
  for (size_t i = 0; i < position_trials_.size(); ++i) {
    position_trials_[i] = keep * position_trials_[i] + (i < tried ? 1 : 0);
    position_accepted_[i] = keep * position_accepted_[i] + (i < static_cast<size_t>(round.accepted) ? 1 : 0);
  }
}

}  // namespace okapi::runtime
