// DraftLength on simulated drafters: rounds cost what a cost model says (with noise, and plain
// rounds right after drafting ones run cold), drafts are accepted at random with a fixed rate. A
// drafter that pays must be run near its best fixed length; one that does not must cost at most
// 3% over plain decoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "runtime/speculative.hpp"

namespace okapi::runtime {
namespace {

struct SimulatedDrafter {
  double plain = 1.0;         // seconds of the target's pass over one token
  double per_extra = 0.12;    // ... and per further token in it
  double per_draft = 0.04;    // seconds per drafted token
  double acceptance = 0.7;    // each draft's chance, independently
  double yield = 1.0;         // the chance that the drafter has anything to propose
  double cold_penalty = 1.3;  // a plain pass right after a drafting round or the prompt's pass
  double noise = 0.1;         // each time is scaled by up to this much either way
};

struct Outcome {
  double seconds = 0;
  int rounds = 0;
};

// Decodes `tokens` tokens. `fixed` >= 0 drafts that many every round; otherwise `length` decides.
Outcome simulate(const SimulatedDrafter& sim, int tokens, int fixed, DraftLength* length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto noisy = [&](double seconds) { return seconds * (1 + sim.noise * (2 * unit(rng) - 1)); };
  Outcome out;
  int done = 0;
  bool drafted_last = false;
  while (done < tokens) {
    const int room = tokens - done - 1;
    const int k = fixed >= 0 ? std::min(fixed, room) : length->next(room);
    const int drafted = k > 0 && unit(rng) < sim.yield ? k : 0;
    int accepted = 0;
    while (accepted < drafted && unit(rng) < sim.acceptance) ++accepted;
    const int emitted = accepted + 1;
    const double draft_seconds = noisy(sim.per_draft * k);
    double verify_seconds = noisy(sim.plain + sim.per_extra * drafted);
    if (k == 0 && (drafted_last || out.rounds == 0)) verify_seconds *= sim.cold_penalty;
    if (fixed < 0) length->record({k, drafted, accepted, draft_seconds, 0, verify_seconds});
    drafted_last = k > 0;
    out.seconds += draft_seconds + verify_seconds;
    done += emitted;
    ++out.rounds;
  }
  return out;
}

double adaptive_seconds(const SimulatedDrafter& sim, int tokens, int draft_max, uint32_t seed) {
  DraftLength length(draft_max, 0);
  return simulate(sim, tokens, -1, &length, seed).seconds;
}

double best_fixed_seconds(const SimulatedDrafter& sim, int tokens, int draft_max, uint32_t seed) {
  double best = simulate(sim, tokens, 0, nullptr, seed).seconds;
  for (int k = 1; k <= draft_max; ++k) best = std::min(best, simulate(sim, tokens, k, nullptr, seed).seconds);
  return best;
}

TEST(DraftLength, ExpectedRateFollowsTheCostModel) {
  DraftLength length(8, 0);
  EXPECT_LT(length.expected_rate(0), 0);  // nothing measured yet
  // Two plain rounds (the first, cold, is not timed), then a drafting round of 1 (the shortest
  // length), whose draft is rejected.
  ASSERT_EQ(length.next(100), 0);
  length.record({0, 0, 0, 0, 0, 5.0});
  ASSERT_EQ(length.next(100), 0);
  length.record({0, 0, 0, 0, 0, 1.0});
  EXPECT_DOUBLE_EQ(length.expected_rate(0), 1.0);
  EXPECT_LT(length.expected_rate(1), 0);
  ASSERT_EQ(length.next(100), 1);
  length.record({1, 1, 0, 0.1, 0, 1.2});
  // Over all positions alpha = (0 + 0.5) / (1 + 1), the prior of 1 in 2 worth one trial; at the
  // first position (0 + 2 * 0.25) / (1 + 2), with the pooled rate worth two trials; later ones
  // have no trials of their own. The pass costs 1 + 0.2 per draft; the drafter, with one call
  // of 1 token seen, 0.1 per token.
  const double pooled = 0.25, first = 0.5 / 3;
  for (int k = 1; k <= 4; ++k) {
    double tokens = 1, reach = first;
    for (int i = 1; i <= k; ++i, reach *= pooled) tokens += reach;
    EXPECT_NEAR(length.expected_rate(k), tokens / (0.1 * k + 1.0 + 0.2 * k), 1e-12) << k;
  }
  EXPECT_EQ(length.next(100), 0);  // drafting does not pay at that rate
}

TEST(DraftLength, RunsAGoodDrafterNearItsBestFixedLength) {
  for (const double acceptance : {0.6, 0.75, 0.9}) {
    SimulatedDrafter sim;
    sim.acceptance = acceptance;
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      const double best = best_fixed_seconds(sim, 512, 16, seed);
      const double plain = simulate(sim, 512, 0, nullptr, seed).seconds;
      const double adaptive = adaptive_seconds(sim, 512, 16, seed);
      EXPECT_LT(adaptive, 1.12 * best) << "acceptance " << acceptance << " seed " << seed;
      EXPECT_LT(adaptive, 0.8 * plain) << "acceptance " << acceptance << " seed " << seed;
    }
  }
}

TEST(DraftLength, ADrafterThatDoesNotPayCostsAtMostThreePercent) {
  SimulatedDrafter self_draft;  // a layer-skip self-drafter: a draft costs 2/3 of a target token
  self_draft.per_draft = 0.67;
  self_draft.acceptance = 0.5;
  SimulatedDrafter compressed = self_draft;  // a compressed self-drafter
  compressed.per_draft = 0.8;
  compressed.acceptance = 0.6;
  SimulatedDrafter lookup;  // prompt lookup on text that does not repeat
  lookup.per_draft = 0.002;
  lookup.yield = 0.4;
  lookup.acceptance = 0.1;
  lookup.per_extra = 0.15;
  int case_number = 0;
  for (const SimulatedDrafter& sim : {self_draft, compressed, lookup}) {
    ++case_number;
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      const double plain = simulate(sim, 256, 0, nullptr, seed).seconds;
      EXPECT_LT(adaptive_seconds(sim, 256, 16, seed), 1.03 * plain) << "case " << case_number << " seed " << seed;
      EXPECT_LT(adaptive_seconds(sim, 2048, 16, seed), 1.02 * plain * 8) << "case " << case_number << " seed " << seed;
    }
  }
}

TEST(DraftLength, FollowsADrafterThatStartsOrStopsPaying) {
  // A stretch of text the drafter predicts well, one it does not predict at all, and a good one
  // again: the controller must stop drafting, and start again (at its next check, at most 128
  // rounds later).
  SimulatedDrafter good;
  good.acceptance = 0.85;
  SimulatedDrafter bad = good;
  bad.acceptance = 0.0;
  bad.per_draft = 0.3;
  DraftLength length(16, 0);
  const double seconds = simulate(good, 512, -1, &length, 3).seconds + simulate(bad, 256, -1, &length, 4).seconds +
                         simulate(good, 512, -1, &length, 5).seconds;
  const double oracle = best_fixed_seconds(good, 512, 16, 3) + simulate(bad, 256, 0, nullptr, 4).seconds +
                        best_fixed_seconds(good, 512, 16, 5);
  EXPECT_LT(seconds, 1.2 * oracle);
  // Drafting throughout would cost far more.
  EXPECT_GT(simulate(bad, 256, 16, nullptr, 4).seconds, 1.5 * simulate(bad, 256, 0, nullptr, 4).seconds);
}

TEST(DraftLength, NeverExceedsTheRoomOrTheLimits) {
  DraftLength length(6, 3);
  for (int round = 0; round < 400; ++round) {
    const int room = round % 9;
    const int k = length.next(room);
    EXPECT_LE(k, std::min(room, 6));
    EXPECT_TRUE(k == 0 || k >= 3) << k;
    length.record({k, k, k / 2, 0.04 * k, 0, 1.0 + 0.1 * k});
  }
  DraftLength none(0, 0);  // --draft-max 0: never drafts
  for (int round = 0; round < 10; ++round) EXPECT_EQ(none.next(10), 0);
}

}  // namespace
}  // namespace okapi::runtime
