// Seed 003's online basis (paper 6 §5): the input basis of a compressed self-drafter updated by
// Oja's rule from speculative-decoding rejections. A low-rank projection W ≈ (W·Vᵀ)·V keeps an
// orthonormal basis V (rank x n_in) of its input space. At a rejection the drafter and the target
// read the same tokens at the same position; per basis, x = (the target's input to the projection)
// − (the drafter's), and each row of V moves by Oja's rank-1 rule
//     v_i ← v_i + η_t · x · (xᵀ v_i),   η_t = η₀ / √t   (t: samples this basis has taken)
// followed by Gram–Schmidt across the rows (deflation), so V stays orthonormal. Samples queue
// (bounded, oldest dropped) and are applied between decode steps once `min_rejections` have
// gathered, the steps of one batch summed and orthonormalized once (per-sample Gram–Schmidt of
// every basis costs seconds per batch on a 10M model); each applied batch bumps the basis's version and recomputes out = W·Vᵀ from the dense
// weight, the "lazy recompute of the cached projection" of the seed.
//
// The drafter runs as the dense model through ObservingOps with every factored projection
// replaced by (out, V): it needs the dense weights (the target's), which a drafter loaded from
// its compressed file alone does not have.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "compress/calibration.hpp"
#include "format/gguf.hpp"
#include "model/model.hpp"

namespace okapi::lab {

struct OnlineBasisOptions {
  double eta0 = 0.01;          // the seed's default learning rate
  int min_rejections = 4;      // the seed's gate: fewer queued samples are not applied yet
  size_t queue_capacity = 256;  // the seed's ONB_QUEUE_CAP
};

// One basis and the projections that read its input (GRC's Q/K/V share one).
struct OnlineBasisUnit {
  std::vector<std::string> weights;  // dense weight names, e.g. blk.0.attn_q.weight
  int64_t n_in = 0, rank = 0;
  std::vector<float> basis;         // rank x n_in, orthonormal rows
  std::vector<std::vector<float>> dense;  // per weight: n_out x n_in
  uint64_t version = 0;             // bumped per applied batch
  uint64_t samples = 0;             // t of η_t
};

struct OnlineBasisStats {
  uint64_t rejections = 0;   // samples queued
  uint64_t dropped = 0;      // pushed out of a full queue
  uint64_t applied = 0;      // samples applied
  uint64_t batches = 0;      // apply_pending calls that changed the bases
  double update_seconds = 0;  // Oja steps plus the recomputed out-factors
};

class OnlineBasis {
 public:
  // From a model made by `okapi compress` and the dense model it was made from: each basis is
  // the row space of a stored in-factor, orthonormalized. For the methods whose metric is the
  // identity (svd, gp, grc) the replacements then compute what the compressed file computes;
  // for the others the projection onto that row space is a different (worse) approximation.
  // Throws okapi::Error when the files do not match (a factored weight the dense model lacks,
  // other shapes) or the compressed file has no factored projection.
  OnlineBasis(const gguf::File& compressed, const model::Model& dense, OnlineBasisOptions options = {});
  // From given units (tests); each basis is orthonormalized.
  OnlineBasis(std::vector<OnlineBasisUnit> units, OnlineBasisOptions options = {});

  const std::vector<OnlineBasisUnit>& units() const { return units_; }
  // Replacements for ObservingOps, by dense weight name; updated in place by apply_pending().
  const std::map<std::string, compress::ObservingOps::Replacement>& replacements() const { return replacements_; }
  // The name of the weight whose mat-mul input is unit u's x (its first weight).
  const std::string& input_name(size_t u) const { return units_[u].weights.front(); }

  // One rejection: x per unit (units().size() vectors of n_in floats), target − drafter.
  void queue_rejection(std::vector<std::vector<float>> samples);
  // Applies every queued sample once at least min_rejections are queued; returns how many.
  size_t apply_pending();
  const OnlineBasisStats& stats() const { return stats_; }

 private:
  void rebuild(size_t u);
  std::vector<OnlineBasisUnit> units_;
  OnlineBasisOptions options_;
  std::deque<std::vector<std::vector<float>>> queue_;
  std::map<std::string, compress::ObservingOps::Replacement> replacements_;
  OnlineBasisStats stats_;
};

// Orthonormalizes the rows of `rows` (count x n) in place, in order: Gram–Schmidt up to the
// signs, by Householder QR; a row dependent on the earlier ones gets some unit direction
// orthogonal to them. Throws okapi::Error when count > n.
void orthonormalize_rows(std::span<float> rows, int64_t count, int64_t n);

// Oja steps on an orthonormal basis (rank x n): v_i += eta_s · x_s · (x_sᵀ v_i) for each sample,
// with the projections taken before the batch, then one orthonormalization (the deflation).
// Samples orthogonal to the basis leave it untouched.
void oja_steps(std::span<float> basis, int64_t rank, int64_t n, std::span<const std::span<const float>> samples,
               std::span<const double> etas);
void oja_step(std::span<float> basis, int64_t rank, int64_t n, std::span<const float> x, double eta);

}  // namespace okapi::lab
