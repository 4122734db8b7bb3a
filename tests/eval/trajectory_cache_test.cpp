// The GTC measurement on synthetic "models" whose answer is known: an affine block is predicted
// exactly by the fitted linear correction (and not by the stored state alone), an identity block
// by skipping it and by carrying the query's offset from its neighbour; and clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "eval/trajectory_cache.hpp"
#include "model/hparams.hpp"

namespace okapi::eval {
namespace {

// Layer 0: clustered random points; block 0 is affine (A h + b); block 1 is the identity.
HiddenStates synthetic_states(int64_t n, int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g;
  HiddenStates s;
  s.n_tokens = n;
  s.n_layer = 2;
  s.n_embd = d;
  s.n_ctx = 64;
  s.layers.assign(3, std::vector<float>(static_cast<size_t>(n * d)));
  std::vector<double> centres(static_cast<size_t>(8 * d));
  for (double& c : centres) c = 4 * g(rng);
  for (int64_t t = 0; t < n; ++t) {
    const double* c = centres.data() + (t % 8) * d;
    for (int64_t i = 0; i < d; ++i) s.layers[0][static_cast<size_t>(t * d + i)] = static_cast<float>(c[i] + 0.3 * g(rng));
  }
  std::vector<double> a(static_cast<size_t>(d * d)), b(static_cast<size_t>(d));
  for (double& v : a) v = g(rng) / std::sqrt(static_cast<double>(d));
  for (double& v : b) v = g(rng);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      double v = b[static_cast<size_t>(i)];
      for (int64_t j = 0; j < d; ++j) v += a[static_cast<size_t>(i * d + j)] * s.layers[0][static_cast<size_t>(t * d + j)];
      s.layers[1][static_cast<size_t>(t * d + i)] = static_cast<float>(v);
    }
  }
  s.layers[2] = s.layers[1];
  return s;
}

TEST(TrajectoryCache, AffineBlockIsPredictedExactlyByTheLinearCorrection) {
  const HiddenStates s = synthetic_states(400, 16, 1);
  GtcOptions options;
  options.tolerance = 0.01;
  const GtcReport r = measure_trajectory_cache(s, nullptr, options);
  EXPECT_EQ(r.stored, 300);
  EXPECT_EQ(r.queries, 100);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_TRUE(r.logits.empty());
  const Transition& affine = r.steps[0];
  EXPECT_EQ(affine.from, 0);
  EXPECT_EQ(affine.to, 1);
  EXPECT_LT(affine.score(Predictor::NearestJacobi).mean_relative_error, 1e-3);
  EXPECT_EQ(affine.score(Predictor::NearestJacobi).hit_rate, 1.0);
  EXPECT_LT(affine.score(Predictor::Linear).mean_relative_error, 1e-3);
  // 32 neighbours span all 16 directions, so the local fit recovers A too.
  EXPECT_LT(affine.score(Predictor::NearestLocalJacobi).mean_relative_error, 1e-3);
  // The stored state alone is off by A times the distance to the neighbour.
  EXPECT_GT(affine.score(Predictor::Nearest).mean_relative_error, 0.02);
  EXPECT_LT(affine.score(Predictor::Nearest).hit_rate, 0.5);
  EXPECT_GT(affine.mean_anchor_distance, 0.0);

  const Transition& identity = r.steps[1];
  EXPECT_LT(identity.score(Predictor::Skip).mean_relative_error, 1e-7);
  EXPECT_LT(identity.score(Predictor::NearestDelta).mean_relative_error, 1e-6);
  EXPECT_EQ(identity.score(Predictor::NearestJacobi).hit_rate, 1.0);
  EXPECT_EQ(identity.score(Predictor::NearestLocalJacobi).hit_rate, 1.0);
  EXPECT_DOUBLE_EQ(r.lookup_flops, 2.0 * 300 * 16);
  EXPECT_DOUBLE_EQ(r.jacobi_flops, 2.0 * 16 * 16);
}

TEST(TrajectoryCache, CoverageAndHitRatesFollowTheTolerance) {
  const HiddenStates s = synthetic_states(400, 16, 2);
  GtcOptions tight, loose;
  tight.tolerance = 1e-6;
  loose.tolerance = 10;
  const GtcReport t = measure_trajectory_cache(s, nullptr, tight), l = measure_trajectory_cache(s, nullptr, loose);
  EXPECT_EQ(t.steps[0].coverage, 0.0);
  EXPECT_EQ(t.steps[0].score(Predictor::Nearest).hit_rate, 0.0);
  EXPECT_EQ(l.steps[0].coverage, 1.0);
  for (int p = 0; p < kPredictors; ++p) EXPECT_EQ(l.steps[0].scores[static_cast<size_t>(p)].hit_rate, 1.0);
  EXPECT_EQ(predictor_name(Predictor::NearestJacobi), "nearest+J");
}

TEST(TrajectoryCache, ClearErrors) {
  const HiddenStates s = synthetic_states(40, 8, 3);
  GtcOptions options;
  options.stored_fraction = 0.99;  // 40 tokens: 40 stored, no query
  EXPECT_THROW(measure_trajectory_cache(s, nullptr, options), Error);
  options.stored_fraction = 0.5;
  options.tolerance = 0;
  EXPECT_THROW(measure_trajectory_cache(s, nullptr, options), Error);
  options.tolerance = 0.05;
  HiddenStates no_layers = s;
  no_layers.n_layer = 0;
  no_layers.layers.resize(1);
  EXPECT_THROW(measure_trajectory_cache(no_layers, nullptr, options), Error);
}

TEST(TrajectoryCache, BlockFlopsCountProjectionsAttentionAndFfn) {
  model::HParams hp;
  hp.n_embd = 8;
  hp.n_head = 2;
  hp.n_head_kv = 1;
  hp.head_dim_k = hp.head_dim_v = 4;
  hp.n_ff = 16;
  // q 8·8, kv 8·8, o 8·8, ffn 3·8·16, attention 2·8·10 multiply-adds.
  EXPECT_DOUBLE_EQ(block_flops_per_token(hp, 10), 2.0 * (64 + 64 + 64 + 384 + 160));
}

}  // namespace
}  // namespace okapi::eval
