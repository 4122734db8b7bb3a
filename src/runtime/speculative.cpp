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
constexpr double kDraftMargin = 1.02;   // the predicted gain drafting needs over plain decoding
constexpr int64_t kFirstCheck = 16;     // rounds to the first check of the estimates not in use
constexpr int64_t kLastCheck = 256;     // the longest interval between checks

void average(double& value, int& samples, double newest) {
  const double w = std::max(kWeight, 1.0 / (samples + 1));
  value += w * (newest - value);
  ++samples;
}
}  // namespace

DraftLength::DraftLength(int draft_max, int draft_min)
    : min_length_(std::max(1, draft_min)), max_length_(draft_max) {}

double DraftLength::expected_rate(int k) const {
  if (plain_samples_ == 0) return -1;
  if (k == 0) return 1.0 / plain_seconds_;
  if (draft_samples_ == 0) return -1;
  const double alpha = std::clamp((accepted_ + kPriorAccepted) / (trials_ + kPriorTrials), 0.0, 1.0);
  // Tokens a round yields when the drafter proposes k: the first is certain, each further one
  // needs every draft before it. When it proposes nothing the round is a plain one.
  const double with_drafts = alpha > 0.9999 ? k + 1 : (1 - std::pow(alpha, k + 1)) / (1 - alpha);
  const double tokens = (1 - yield_) + yield_ * with_drafts;
  const double seconds = draft_seconds_ * k + plain_seconds_ + extra_seconds_ * yield_ * k;
  return tokens / seconds;
}

int DraftLength::best_length(int room) const {
  int best = 0;
  double best_rate = -1;
  for (int k = min_length_; k <= std::min(max_length_, room); ++k) {
    const double r = expected_rate(k);
    if (r > best_rate) best = k, best_rate = r;
  }
  // Drafting must beat plain decoding by a margin: the model leaves costs out (the drafter's
  // bookkeeping, cache rollback), and a drafter that barely pays is not worth the risk.
  return best_rate > kDraftMargin * expected_rate(0) ? best : 0;
}

int DraftLength::next(int room) {
  ++rounds_;
  room = std::max(room, 0);
  planned_ = Check::None;
  if (room < min_length_ || max_length_ < min_length_) return 0;
  // Plain decoding is measured first, then drafting. A later check of plain decoding runs two
  // plain rounds and times the second.
  if (pending_plain_timed_) {
    pending_plain_timed_ = false;
    planned_ = Check::PlainTimed;
    return 0;
  }
  if (plain_samples_ == 0) {  // the first round follows the prompt's pass: warm, and timed
    planned_ = Check::PlainTimed;
    return 0;
  }
  const int first_draft = std::min({min_length_, max_length_, room});
  if (draft_samples_ < 1) {
    planned_ = Check::Draft;
    return first_draft;
  }
  const int best = best_length(room);
  if (best != last_best_) {
    // A new choice: check what it leaves unmeasured soon, then less and less often.
    if (last_best_ < 0 || (best == 0) != (last_best_ == 0)) check_every_ = kFirstCheck, next_check_ = rounds_ + kFirstCheck;
    last_best_ = best;
  }
  if (rounds_ >= next_check_) {
    check_every_ = std::min(check_every_ * 2, kLastCheck);
    next_check_ = rounds_ + check_every_;
    if (best > 0) {
      pending_plain_timed_ = true;
      planned_ = Check::PlainCold;
      return 0;
    }
    planned_ = Check::Draft;
    return first_draft;
  }
  return best;
}

void DraftLength::record(const DraftRound& round) {
  if (round.requested <= 0) {
    // Plain rounds right after drafting ones run cold: only the second of a pair is timed.
    if (planned_ != Check::PlainCold && !last_drafted_ && round.verify_seconds > 0)
      average(plain_seconds_, plain_samples_, round.verify_seconds);
    last_drafted_ = false;
    return;
  }
  last_drafted_ = true;
  average(draft_seconds_, draft_samples_, round.draft_seconds / round.requested);
  average(yield_, yield_samples_, static_cast<double>(round.drafted) / round.requested);
  if (round.drafted <= 0) return;
  if (plain_samples_ > 0)
    average(extra_seconds_, extra_samples_, std::max(0.0, round.verify_seconds - plain_seconds_) / round.drafted);
  // Accepted drafts, and trials: those plus the rejected one, if any (a round that took every
  // draft says only that the next would have had its own chance).
  // Evidence ages with every round, drafted or not: after a stretch of plain decoding one
  // check's drafts outweigh what was seen before it.
  const double keep = std::pow(kAcceptanceKeep, static_cast<double>(rounds_ - acceptance_round_));
  acceptance_round_ = rounds_;
  accepted_ = keep * accepted_ + round.accepted;
  trials_ = keep * trials_ + round.accepted + (round.accepted < round.drafted ? 1 : 0);
}

}  // namespace okapi::runtime
