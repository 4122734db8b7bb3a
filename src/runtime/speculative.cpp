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
constexpr double kAverageWeight = 0.1;  // of the newest round in the moving averages
constexpr int kWarmRounds = 3;          // rounds of a length before its average is trusted
constexpr int64_t kExploreEvery = 16;   // rounds before a neighbouring length is run again, at first
}  // namespace

DraftLength::DraftLength(int draft_max, int draft_min) {
  lengths_.push_back(0);
  for (int k = std::max(1, draft_min); k < draft_max; k *= 2) {
    if (k >= draft_min) lengths_.push_back(k);
  }
  if (draft_max >= std::max(1, draft_min)) lengths_.push_back(draft_max);
  lengths_.erase(std::unique(lengths_.begin(), lengths_.end()), lengths_.end());
  tokens_.assign(lengths_.size(), 0.0);
  seconds_.assign(lengths_.size(), 0.0);
  samples_.assign(lengths_.size(), 0);
  used_.assign(lengths_.size(), -1);
}

double DraftLength::rate(size_t i) const {
  return samples_[i] > 0 && seconds_[i] > 0 ? tokens_[i] / seconds_[i] : -1.0;
}

int DraftLength::next(int room) {
  ++rounds_;
  const auto fits = [&](size_t i) { return lengths_[i] <= std::max(room, 0); };
  const auto warm = [&](size_t i) { return samples_[i] >= kWarmRounds; };
  // A length is worth trying once the next shorter one has kept up with plain decoding (successive
  // doubling; within 10%, as a few rounds' rate is noisy): a drafter that does not pay costs a few
  // short rounds, not rounds of --draft-max.
  const auto eligible = [&](size_t i) {
    return i <= 1 || (warm(i - 1) && warm(0) && rate(i - 1) > 0.9 * rate(0));
  };
  size_t best = 0;
  for (size_t i = 0; i < lengths_.size(); ++i)
    if (fits(i) && warm(i) && rate(i) > rate(best)) best = i;
  size_t pick = best;
  bool chosen = false;
  for (size_t i = 0; i < lengths_.size() && !chosen; ++i) {
    if (!warm(i) && fits(i) && eligible(i)) pick = i, chosen = true;
  }
  // Exploring gets rarer (16, 32, 64, ... rounds) while the best length stays the best.
  if (best != best_) best_ = best, explore_every_ = kExploreEvery, next_explore_ = rounds_ + kExploreEvery;
  if (!chosen && rounds_ >= next_explore_) {
    explore_every_ = std::min<int64_t>(explore_every_ * 2, 1024);
    next_explore_ = rounds_ + explore_every_;
    // Refresh plain decoding or a neighbour of the best length, the one used least recently
    // (plain decoding's cost drifts too: its first rounds ran on a cold cache).
    size_t neighbour = best;
    for (const size_t i : {size_t{0}, best - 1, best + 1}) {
      if (i == best) continue;
      if (i >= lengths_.size() || !fits(i) || !eligible(i)) continue;
      if (neighbour == best || used_[i] < used_[neighbour]) neighbour = i;
    }
    pick = neighbour;
  }
  planned_ = pick;
  used_[pick] = rounds_;
  return std::min(lengths_[pick], std::max(room, 0));
}

void DraftLength::record(int tokens, double seconds) {
  if (seconds <= 0) return;
  // Averages of tokens and of seconds (their ratio is the rate): one round that drafted well or
  // badly moves both, so the rate does not swing with single rounds' ratios.
  const size_t i = planned_;
  const double w = samples_[i] == 0 ? 1.0 : std::max(kAverageWeight, 1.0 / (samples_[i] + 1));
  tokens_[i] += w * (tokens - tokens_[i]);
  seconds_[i] += w * (seconds - seconds_[i]);
  ++samples_[i];
}

}  // namespace okapi::runtime
