#include "sample/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.hpp"

namespace okapi::sample {

void SamplerConfig::validate() const {
  if (repeat_last_n < -1) throw_error("sampler: repeat_last_n = {}: must be -1, 0 or positive", repeat_last_n);
  if (!(repeat_penalty > 0.0f)) throw_error("sampler: repeat_penalty = {}: must be positive", repeat_penalty);
  if (top_p < 0.0f || !(top_p == top_p)) throw_error("sampler: top_p = {}: must be in [0, 1]", top_p);
  if (min_p < 0.0f || min_p > 1.0f) throw_error("sampler: min_p = {}: must be in [0, 1]", min_p);
  if (typical_p < 0.0f || !(typical_p == typical_p)) throw_error("sampler: typical_p = {}: must be in [0, 1]", typical_p);
  if (!(temperature == temperature)) throw_error("sampler: temperature is NaN");
  if (min_keep < 0) throw_error("sampler: min_keep = {}: must not be negative", min_keep);
}

std::string SamplerConfig::describe() const {
  return fmt::format(
      "repeat_last_n = {}, repeat_penalty = {:.3f}, frequency_penalty = {:.3f}, presence_penalty = {:.3f}, "
      "top_k = {}, typical_p = {:.3f}, top_p = {:.3f}, min_p = {:.3f}, temp = {:.3f}, min_keep = {}, seed = {}",
      repeat_last_n, repeat_penalty, frequency_penalty, presence_penalty, top_k, typical_p, top_p, min_p,
      temperature, min_keep, seed == kRandomSeed ? std::string("random") : std::to_string(seed));
}

std::string SamplerConfig::describe_chain() const {
  if (greedy()) return "penalties -> greedy";
  return "penalties -> top-k -> typical -> top-p -> min-p -> temp -> dist";
}

uint32_t resolve_seed(uint32_t seed) {
  if (seed != kRandomSeed) return seed;
  std::random_device device;
  return device();
}

Sampler::Sampler(SamplerConfig config)
    : config_(config),
      seed_(resolve_seed(config.seed)),
      rng_(seed_),
      penalties_(config.repeat_last_n, config.repeat_penalty, config.frequency_penalty, config.presence_penalty) {
  config_.validate();
}

Candidates Sampler::biased(std::span<const float> logits) const {
  if (logits.empty()) throw_error("sampler: empty logits row");
  Candidates c = Candidates::from_logits(logits);
  if (config_.logit_bias.empty()) return c;
  for (const auto& [id, bias] : config_.logit_bias)
    if (id >= 0 && static_cast<size_t>(id) < c.items.size()) c.items[static_cast<size_t>(id)].logit += bias;
  // Every token banned: nothing is left to draw from (softmax over -inf is NaN).
  if (std::all_of(c.items.begin(), c.items.end(), [](const Candidate& t) { return std::isinf(t.logit) && t.logit < 0; }))
    throw_error("sampler: logit_bias bans every token");
  return c;
}

Candidates Sampler::chain(std::span<const float> logits) const {
  Candidates c = biased(logits);
  penalties_.apply(c);
  if (config_.greedy()) return c;
  truncate_and_scale(c);
  return c;
}

void Sampler::truncate_and_scale(Candidates& c) const {
  const auto min_keep = static_cast<size_t>(config_.min_keep);
  top_k(c, config_.top_k);
  typical(c, config_.typical_p, min_keep);
  top_p(c, config_.top_p, min_keep);
  min_p(c, config_.min_p, min_keep);
  temperature(c, config_.temperature);
}

TokenId Sampler::sample(std::span<const float> logits) {
  Candidates c = chain(logits);
  if (config_.greedy()) return c.items[argmax_index(c)].id;
  return c.items[draw(c, rng_)].id;
}

namespace {

bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The `wanted` best candidates the filter allows, best first (fewer when fewer are allowed), or
// nullopt when finding them one by one would check too many (then the whole mask is cheaper).
std::optional<std::vector<Candidate>> best_allowed(std::vector<Candidate>& items, size_t wanted, const TokenFilter& filter) {
  std::vector<Candidate> found;
  size_t ranked = 0;  // items[0, ranked) are in rank order
  size_t checked = 0;
  size_t window = std::max<size_t>(64, 4 * wanted);
  constexpr size_t kMostChecks = 4096;
  while (found.size() < wanted && checked < items.size()) {
    if (checked >= kMostChecks) return std::nullopt;
    const size_t end = std::min(items.size(), ranked + window);
    std::partial_sort(items.begin() + static_cast<std::ptrdiff_t>(ranked), items.begin() + static_cast<std::ptrdiff_t>(end),
                      items.end(), ranks_before);
    ranked = end;
    for (; checked < ranked && found.size() < wanted; ++checked)
      if (filter.allows(items[checked].id)) found.push_back(items[checked]);
    window *= 4;
  }
  return found;
}

}  // namespace

TokenId Sampler::sample(std::span<const float> logits, const TokenFilter& filter) {
  Candidates c = biased(logits);
  penalties_.apply(c);
  // Greedy keeps one candidate, top-k k of them: those are found by checking the best ones.
  const size_t wanted = config_.greedy() ? 1 : config_.top_k > 0 ? static_cast<size_t>(config_.top_k) : 0;
  std::optional<std::vector<Candidate>> kept;
  if (wanted > 0) kept = best_allowed(c.items, wanted, filter);
  if (kept) {
    c.items = std::move(*kept);
    c.sorted = true;
  } else {
    const std::vector<uint8_t>& mask = filter.mask();
    std::erase_if(c.items, [&](const Candidate& t) {
      return static_cast<size_t>(t.id) >= mask.size() || mask[static_cast<size_t>(t.id)] == 0;
    });
  }
  if (c.items.empty()) throw_error("sampler: the constraint allows no token");
  if (config_.greedy()) return c.items[argmax_index(c)].id;
  truncate_and_scale(c);
  return c.items[draw(c, rng_)].id;
}

Candidates Sampler::distribution(std::span<const float> logits) const {
  Candidates c = chain(logits);
  if (config_.greedy()) {
    const Candidate best = c.items[argmax_index(c)];
    c.items.assign(1, Candidate{best.id, best.logit, 1.0f});
    c.sorted = true;
    return c;
  }
  softmax(c);
  return c;
}

TokenId Sampler::draw_from(const Candidates& dist) {
  if (dist.items.empty()) throw_error("sampler: no candidates left to sample from");
  std::vector<double> weights(dist.items.size());
  for (size_t i = 0; i < dist.items.size(); ++i) weights[i] = dist.items[i].p;
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  return dist.items[static_cast<size_t>(pick(rng_))].id;
}

void Sampler::reseed(uint32_t seed) {
  seed_ = seed;
  rng_.seed(seed);
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

void Sampler::accept(TokenId token) { penalties_.accept(token); }

void Sampler::reset() {
  penalties_.reset();
  rng_.seed(seed_);
}

}  // namespace okapi::sample
