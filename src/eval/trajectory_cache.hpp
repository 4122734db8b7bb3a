// A feasibility measurement of seed 003's Geodesic Trajectory Caching (GTC): keep the trajectories
// (the hidden state at every layer) of tokens already run, and serve a new token by the nearest
// stored trajectory plus a linear "Jacobi" correction,
//   h_b(query) ≈ h_b(stored) + J_{a→b} · (h_a(query) − h_a(stored)),
// instead of running blocks a .. b−1. The seed measures cache *coverage* (how many held-out points
// lie near a stored one) on a fitted manifold; this measures what matters for skipping compute:
// how close the prediction comes to the state the model really computes.
//
// The tokens of a text are split in text order: the first `stored_fraction` are the library, the
// rest are queries (other sentences, not neighbours of the same context). For each query, the
// nearest stored trajectory by h_a (Euclidean). Predictors of h_b, each scored by the relative
// error ‖pred − true‖ / ‖true‖ and the share of queries below `tolerance` (a hit):
//   skip           h_a(query): run nothing (residual stream carried over; at b = L, the logit lens)
//   linear         the least-squares affine map h_a → h_b fitted on the library, no lookup
//   nearest        h_b(stored): the stored trajectory's state as is (GTC's zeroth order)
//   nearest+delta  h_b(stored) + (h_a(query) − h_a(stored)): J = identity
//   nearest+J      h_b(stored) + J (h_a(query) − h_a(stored)), J the linear part of `linear` (one
//                  Jacobian estimate per layer pair, fitted by ridge least squares on the library;
//                  not the per-point Jacobian of the block, which the engine cannot differentiate)
//   nearest+localJ the same with a local J: the linear map that best takes the stored anchor's
//                  `local_neighbours` nearest stored neighbours' offsets in h_a to their offsets in
//                  h_b (ridge, minimum norm: δ is projected on the span of those offsets) — the
//                  first-order Taylor term at the anchor as far as the library can tell it
// Steps: b = a + 1 for every block a (does one block's output follow?). Logits: b = L (the final
// state) from every a, compared through the output head: top-1 agreement and KL(true ‖ pred).
// Hit rates are oracle numbers (the truth decides a hit), an upper bound on what a runtime that
// must decide without running the block could serve.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "eval/hidden_states.hpp"

namespace okapi::model {
struct HParams;
}

namespace okapi::eval {

inline constexpr int kPredictors = 6;
enum class Predictor { Skip, Linear, Nearest, NearestDelta, NearestJacobi, NearestLocalJacobi };
// "skip", "linear", "nearest", "nearest+delta", "nearest+J", "nearest+localJ"
std::string_view predictor_name(Predictor p);

struct PredictionScore {
  double hit_rate = 0;  // share of queries with relative error < tolerance
  double mean_relative_error = 0, median_relative_error = 0;
  // With logits (b = L): share of queries whose predicted top-1 token is the true one, and the
  // mean KL(softmax(true) ‖ softmax(pred)) in nats.
  double top1 = 0, kl = 0;
};

struct Transition {
  int64_t from = 0, to = 0;  // layers a and b (b = n_layer: the final residual)
  double coverage = 0;       // share of queries whose nearest stored h_a is within tolerance · ‖h_a(query)‖
  double mean_anchor_distance = 0;  // mean ‖h_a(query) − h_a(stored)‖ / ‖h_a(query)‖
  std::array<PredictionScore, kPredictors> scores;
  const PredictionScore& score(Predictor p) const { return scores[static_cast<size_t>(p)]; }
};

struct GtcOptions {
  double tolerance = 0.05;        // relative error of a hit
  double stored_fraction = 0.75;  // share of the tokens (first in text order) in the library
  double ridge = 1e-4;            // J's ridge, relative to the mean eigenvalue of the library's covariance
  int64_t local_neighbours = 32;  // stored neighbours of the anchor the local J is fitted on
};

struct GtcReport {
  int64_t stored = 0, queries = 0, n_layer = 0, n_embd = 0;
  double tolerance = 0;
  std::vector<Transition> steps;   // a → a + 1 for a = 0 .. n_layer − 1
  std::vector<Transition> logits;  // a → n_layer for a = 0 .. n_layer − 1; empty without a head
  // Multiply-adds ×2 per query: a brute-force nearest-neighbour lookup over the library, and J's
  // matrix-vector product. The price of trying the cache, hit or miss.
  double lookup_flops = 0, jacobi_flops = 0;
};

// Throws okapi::Error when the split leaves fewer than 2 tokens on either side, or the options are
// out of range. `head` may be null (no logits).
GtcReport measure_trajectory_cache(const HiddenStates& states, const OutputHead* head, const GtcOptions& options);

// Floating-point operations of one block for one token at `context` tokens of attention (the
// projections, the attention scores and sums, the FFN), to weigh a hit against the lookup.
double block_flops_per_token(const model::HParams& hp, int64_t context);

}  // namespace okapi::eval
