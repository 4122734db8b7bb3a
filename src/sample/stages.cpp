#include "sample/stages.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.hpp"

namespace okapi::sample {
namespace {

bool before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void sort_by_logit(Candidates& c) {
  if (c.sorted) return;
  std::sort(c.items.begin(), c.items.end(), before);
  c.sorted = true;
}

void truncate(Candidates& c, size_t n) { c.items.resize(std::min(n, c.items.size())); }

}  // namespace

Candidates Candidates::from_logits(std::span<const float> logits) {
  Candidates c;
  c.items.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    c.items[i] = Candidate{static_cast<TokenId>(i), logits[i], 0.0f};
  }
  return c;
}

void softmax(Candidates& c) {
  if (c.items.empty()) throw_error("sampler: no candidates left to sample from");
  sort_by_logit(c);
  const float max_logit = c.items.front().logit;
  float sum = 0.0f;
  for (auto& t : c.items) {
    t.p = std::exp(t.logit - max_logit);
    sum += t.p;
  }
  for (auto& t : c.items) t.p /= sum;
}

void top_k(Candidates& c, int32_t k) {
  if (k <= 0) return;
  const size_t keep = std::min(static_cast<size_t>(k), c.items.size());
  if (!c.sorted) {
    std::partial_sort(c.items.begin(), c.items.begin() + static_cast<std::ptrdiff_t>(keep), c.items.end(), before);
  }
  truncate(c, keep);
  c.sorted = true;
}

void typical(Candidates& c, float p, size_t min_keep) {
  if (p >= 1.0f) return;
  softmax(c);
  // Entropy of the distribution, then how far each token's surprise is from it.
  float entropy = 0.0f;
  for (const auto& t : c.items) entropy += -t.p * std::log(t.p);
  std::vector<float> shift(c.items.size());
  for (size_t i = 0; i < c.items.size(); ++i) shift[i] = std::fabs(-std::log(c.items[i].p) - entropy);
  std::vector<size_t> order(c.items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shift[a] < shift[b]; });
  float cumulative = 0.0f;
  size_t keep = order.size();
  for (size_t i = 0; i < order.size(); ++i) {
    cumulative += c.items[order[i]].p;
    if (cumulative > p && (min_keep == 0 || i + 1 >= min_keep)) {
      keep = i + 1;
      break;
    }
  }
  std::vector<Candidate> kept;
  kept.reserve(keep);
  for (size_t i = 0; i < keep; ++i) kept.push_back(c.items[order[i]]);
  c.items = std::move(kept);
  c.sorted = false;
}

void top_p(Candidates& c, float p, size_t min_keep) {
  if (p >= 1.0f) return;
  softmax(c);
  float cumulative = 0.0f;
  size_t keep = c.items.size();
  for (size_t i = 0; i < c.items.size(); ++i) {
    cumulative += c.items[i].p;
    if (cumulative >= p && i + 1 >= min_keep) {
      keep = i + 1;
      break;
    }
  }
  truncate(c, keep);
}

void min_p(Candidates& c, float p, size_t min_keep) {
  if (p <= 0.0f || c.items.empty()) return;
  // On logits, like llama.cpp: p_i >= p * p_max  <=>  logit_i >= max_logit + log(p).
  if (!c.sorted) {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (const auto& t : c.items) max_logit = std::max(max_logit, t.logit);
    const float threshold = max_logit + std::log(p);
    std::vector<Candidate> kept;
    for (const auto& t : c.items) {
      if (t.logit >= threshold) kept.push_back(t);
    }
    if (kept.size() >= min_keep) {
      c.items = std::move(kept);
      return;
    }
  }
  sort_by_logit(c);
  const float threshold = c.items.front().logit + std::log(p);
  size_t i = 1;
  for (; i < c.items.size(); ++i) {
    if (c.items[i].logit < threshold && i >= min_keep) break;
  }
  truncate(c, i);
}

void temperature(Candidates& c, float temp) {
  if (temp <= 0.0f) {
    const size_t best = argmax_index(c);
    for (size_t i = 0; i < c.items.size(); ++i) {
      if (i != best) c.items[i].logit = -std::numeric_limits<float>::infinity();
    }
    return;
  }
  for (auto& t : c.items) t.logit /= temp;
}

size_t argmax_index(const Candidates& c) {
  if (c.items.empty()) throw_error("sampler: no candidates left to sample from");
  size_t best = 0;
  for (size_t i = 1; i < c.items.size(); ++i) {
    if (c.items[i].logit > c.items[best].logit) best = i;
  }
  return best;
}

size_t draw(Candidates& c, std::mt19937& rng) {
  softmax(c);
  std::vector<double> weights(c.items.size());
  for (size_t i = 0; i < c.items.size(); ++i) weights[i] = c.items[i].p;
  std::discrete_distribution<int> dist(weights.begin(), weights.end());
  return static_cast<size_t>(dist(rng));
}

Penalties::Penalties(int32_t last_n, float repeat, float frequency, float presence)
    : last_n_(last_n), repeat_(repeat), frequency_(frequency), presence_(presence) {}

bool Penalties::active() const {
  return last_n_ != 0 && (repeat_ != 1.0f || frequency_ != 0.0f || presence_ != 0.0f);
}

void Penalties::apply(Candidates& c) const {
  if (!active() || counts_.empty()) return;
  for (auto& t : c.items) {
    const auto it = counts_.find(t.id);
    if (it == counts_.end()) continue;
    const int n = it->second;
    // Dividing a negative logit would make the token more likely: multiply it instead.
    if (t.logit <= 0.0f) {
      t.logit *= repeat_;
    } else {
      t.logit /= repeat_;
    }
    t.logit -= static_cast<float>(n) * frequency_ + static_cast<float>(n > 0) * presence_;
  }
  c.sorted = false;
}

void Penalties::accept(TokenId token) {
  if (last_n_ == 0) return;
  ++counts_[token];
  window_.push_back(token);
  if (last_n_ > 0 && window_.size() > static_cast<size_t>(last_n_)) {
    const TokenId old = window_.front();
    window_.pop_front();
    if (--counts_[old] == 0) counts_.erase(old);
  }
}

void Penalties::reset() {
  window_.clear();
  counts_.clear();
}

int Penalties::count(TokenId token) const {
  const auto it = counts_.find(token);
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace okapi::sample
