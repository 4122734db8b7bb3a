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
constexpr double kAverageWeight = 0.15;  // of the newest round in the moving averages
constexpr int kProbeEvery = 16;          // rounds without drafts before a probe round
void average_into(double& avg, double value) { avg = avg < 0 ? value : avg + kAverageWeight * (value - avg); }
}  // namespace

double DraftLength::expected_rate(int k) const {
  const auto pass = [&](int n) {
    // Measured, or a straight line through the nearest measured lengths (batches cost little more
    // than one token while decode is bound by reading the weights).
    if (n < static_cast<int>(pass_seconds_.size()) && pass_seconds_[static_cast<size_t>(n)] > 0)
      return pass_seconds_[static_cast<size_t>(n)];
    int lo = 0, hi = 0;
    for (int i = 1; i < static_cast<int>(pass_seconds_.size()); ++i) {
      if (pass_seconds_[static_cast<size_t>(i)] <= 0) continue;
      if (i < n) lo = i;
      if (i > n && hi == 0) hi = i;
    }
    if (lo == 0 && hi == 0) return 1.0;
    if (lo == 0) return pass_seconds_[static_cast<size_t>(hi)];
    if (hi == 0) {
      // Past the longest measured batch: grow from it by the slope from the shortest one.
      const int first = [&] {
        for (int i = 1; i < lo; ++i)
          if (pass_seconds_[static_cast<size_t>(i)] > 0) return i;
        return lo;
      }();
      const double t_lo = pass_seconds_[static_cast<size_t>(lo)];
      const double slope = first < lo ? std::max(0.0, (t_lo - pass_seconds_[static_cast<size_t>(first)]) / (lo - first))
                                      : 0.05 * t_lo;
      return t_lo + slope * (n - lo);
    }
    const double a = pass_seconds_[static_cast<size_t>(lo)], b = pass_seconds_[static_cast<size_t>(hi)];
    return a + (b - a) * (n - lo) / (hi - lo);
  };
  const double alpha = std::clamp(acceptance_, 0.0, 0.999);
  const double tokens = k == 0 ? 1.0 : (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
  const double draft_cost = draft_token_seconds_ > 0 ? draft_token_seconds_ * k : 0.0;
  return tokens / (pass(k + 1) + draft_cost);
}

int DraftLength::next(int room) {
  const int cap = std::min(max_, room);
  if (cap <= 0 || cap < min_) return 0;
  if (rounds_ < 2) return cap;  // measure drafting first
  int best = 0;
  double best_rate = expected_rate(0);
  for (int k = std::max(1, min_); k <= cap; ++k) {
    const double rate = expected_rate(k);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  // Estimates go stale while nothing is drafted: now and then a short probe refreshes them.
  if (best == 0 && plain_rounds_ >= kProbeEvery) best = std::min(cap, std::max(min_, 2));
  return best;
}

void DraftLength::record(int drafted, int accepted, double draft_seconds, double target_seconds) {
  ++rounds_;
  plain_rounds_ = drafted == 0 ? plain_rounds_ + 1 : 0;
  const auto length = static_cast<size_t>(drafted + 1);
  if (pass_seconds_.size() <= length) pass_seconds_.resize(length + 1, -1.0);
  average_into(pass_seconds_[length], target_seconds);
  if (drafted == 0) return;
  average_into(draft_token_seconds_, draft_seconds / drafted);
  // Each draft is one acceptance test until the first rejection.
  const int trials = accepted + (accepted < drafted ? 1 : 0);
  acceptance_ += kAverageWeight * (static_cast<double>(accepted) / trials - acceptance_);
}

}  // namespace okapi::runtime
