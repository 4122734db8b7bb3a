// How many dimensions a point cloud (hidden states of one layer) really uses:
//  - TwoNN (Facco, d'Errico, Rodriguez & Laio 2017): for every point the ratio μ = r₂/r₁ of its
//    second- and first-nearest-neighbour distances is Pareto distributed with exponent d on a
//    locally uniform d-dimensional manifold, so −log(1 − F(μ)) = d · log μ; d is the
//    least-squares slope through the origin over the empirical F, the largest 10% of μ left out
//    (they are the noisiest). Exact duplicate points (r₁ = 0) are dropped first. TwoNN sees the
//    scale of the nearest-neighbour distances; Facco et al. check an estimate by decimation, so
//    the estimate on every 4th point (distances about 4^(1/d) times longer) is reported beside it.
//  - PCA: the number of principal components holding 90% / 99% of the variance, and the
//    participation ratio (Σλ)² / Σλ², a linear dimension to set beside TwoNN's non-linear one.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace okapi::eval {

// For each of the n_queries rows of `queries`, its k nearest rows of `base` (Euclidean), nearest
// first. With `exclude_same_row` (queries and base the same set) a row is not its own neighbour.
// Both are row-major with `dim` columns; distances are computed exactly for the chosen ones.
struct Neighbours {
  int64_t k = 0;
  std::vector<int64_t> index;     // n_queries x k
  std::vector<double> distance;   // n_queries x k
};
Neighbours nearest_neighbours(std::span<const float> queries, int64_t n_queries, std::span<const float> base,
                              int64_t n_base, int64_t dim, int64_t k, bool exclude_same_row);

struct IntrinsicDimension {
  int64_t points = 0;      // distinct points TwoNN used
  double two_nn = 0;       // TwoNN estimate (0 with fewer than 3 distinct points)
  double two_nn_quarter = 0;  // TwoNN on every 4th point: close to two_nn where the estimate is scale-stable
  int64_t pca_90 = 0, pca_99 = 0;  // principal components for 90% / 99% of the variance
  double participation_ratio = 0;
};

// TwoNN on the n x dim row-major `points`; *used receives the distinct points it kept.
double two_nn_dimension(std::span<const float> points, int64_t n, int64_t dim, int64_t* used = nullptr);

IntrinsicDimension intrinsic_dimension(std::span<const float> points, int64_t n, int64_t dim);

}  // namespace okapi::eval
