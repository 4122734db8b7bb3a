// TwoNN and PCA dimensions on point clouds whose dimension is known: a flat cube and curved
// manifolds (a 3-sphere, a twisted 2-d sheet) embedded by a random rotation in many more
// dimensions; exact duplicates dropped; nearest neighbours against brute force.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "eval/intrinsic_dim.hpp"

namespace okapi::eval {
namespace {

// Rows of `low` (n x k) mapped into `dim` dimensions by a random orthonormal k-frame, plus an offset.
std::vector<float> embed(const std::vector<double>& low, int64_t n, int64_t k, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g;
  std::vector<double> frame(static_cast<size_t>(k * dim));
  for (int64_t j = 0; j < k; ++j) {
    double* f = frame.data() + j * dim;
    for (int64_t i = 0; i < dim; ++i) f[i] = g(rng);
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t p = 0; p < j; ++p) {
        double dot = 0;
        for (int64_t i = 0; i < dim; ++i) dot += f[i] * frame[static_cast<size_t>(p * dim + i)];
        for (int64_t i = 0; i < dim; ++i) f[i] -= dot * frame[static_cast<size_t>(p * dim + i)];
      }
    }
    double norm = 0;
    for (int64_t i = 0; i < dim; ++i) norm += f[i] * f[i];
    for (int64_t i = 0; i < dim; ++i) f[i] /= std::sqrt(norm);
  }
  std::vector<float> out(static_cast<size_t>(n * dim));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      double v = 3.0;  // away from the origin, as hidden states are
      for (int64_t j = 0; j < k; ++j) v += low[static_cast<size_t>(r * k + j)] * frame[static_cast<size_t>(j * dim + i)];
      out[static_cast<size_t>(r * dim + i)] = static_cast<float>(v);
    }
  }
  return out;
}

TEST(IntrinsicDim, FlatCubeInHighDimensions) {
  const int64_t n = 2000, k = 5, dim = 40;
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> low(static_cast<size_t>(n * k));
  for (double& v : low) v = u(rng);
  const IntrinsicDimension d = intrinsic_dimension(embed(low, n, k, dim, 2), n, dim);
  EXPECT_EQ(d.points, n);
  EXPECT_NEAR(d.two_nn, 5.0, 0.75);
  EXPECT_NEAR(d.two_nn_quarter, 5.0, 0.75);  // uniform data: the same at every scale
  EXPECT_LE(d.pca_99, 5);  // a 5-d subspace: every variance beyond it is rounding
  EXPECT_GE(d.pca_90, 4);
  EXPECT_NEAR(d.participation_ratio, 5.0, 0.5);  // equal variances along a cube's axes
}

TEST(IntrinsicDim, CurvedThreeSphere) {
  // S³ ⊂ R⁴: curved, so PCA needs all 4 linear directions while TwoNN sees 3.
  const int64_t n = 2000, k = 4, dim = 30;
  std::mt19937 rng(3);
  std::normal_distribution<double> g;
  std::vector<double> low(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    double norm = 0;
    for (int64_t j = 0; j < k; ++j) norm += std::pow(low[static_cast<size_t>(r * k + j)] = g(rng), 2);
    for (int64_t j = 0; j < k; ++j) low[static_cast<size_t>(r * k + j)] /= std::sqrt(norm);
  }
  const IntrinsicDimension d = intrinsic_dimension(embed(low, n, k, dim, 4), n, dim);
  EXPECT_NEAR(d.two_nn, 3.0, 0.45);
  EXPECT_EQ(d.pca_99, 4);
}

TEST(IntrinsicDim, TwistedSheetNonlinearlyEmbedded) {
  // A 2-d sheet (u, v) bent through 8 non-linear coordinates, then rotated into 50.
  const int64_t n = 2000, k = 8, dim = 50;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> low(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    const double a = 2 * u(rng), b = 2 * u(rng);
    const double coords[8] = {std::cos(a), std::sin(a), std::cos(b), std::sin(b), a * b / 2, std::sin(a + b),
                              std::cos(a - b) / 2, a * a / 4};
    for (int64_t j = 0; j < k; ++j) low[static_cast<size_t>(r * k + j)] = coords[j];
  }
  const IntrinsicDimension d = intrinsic_dimension(embed(low, n, k, dim, 6), n, dim);
  EXPECT_NEAR(d.two_nn, 2.0, 0.3);
  EXPECT_GT(d.pca_99, 2);  // a linear measure overstates a curved sheet
}

TEST(IntrinsicDim, DuplicatesAreDroppedAndTinySetsGiveZero) {
  const int64_t n = 1000, k = 3, dim = 10;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> low(static_cast<size_t>(n * k));
  for (double& v : low) v = u(rng);
  std::vector<float> points = embed(low, n, k, dim, 8);
  const double once = two_nn_dimension(points, n, dim);
  std::vector<float> twice = points;
  twice.insert(twice.end(), points.begin(), points.end());  // every point twice: r₁ would be 0
  int64_t used = 0;
  EXPECT_DOUBLE_EQ(two_nn_dimension(twice, 2 * n, dim, &used), once);
  EXPECT_EQ(used, n);
  EXPECT_EQ(two_nn_dimension(std::vector<float>(20, 1.0f), 2, 10), 0.0);
  EXPECT_THROW(two_nn_dimension(std::vector<float>(7), 2, 4), Error);
}

TEST(IntrinsicDim, NearestNeighboursMatchBruteForce) {
  const int64_t nb = 300, nq = 50, dim = 12, k = 3;
  std::mt19937 rng(9);
  std::normal_distribution<float> g;
  std::vector<float> base(static_cast<size_t>(nb * dim)), queries(static_cast<size_t>(nq * dim));
  for (float& v : base) v = 100.0f + g(rng);  // far from the origin: the ranking must still be right
  for (float& v : queries) v = 100.0f + g(rng);
  for (const bool same : {false, true}) {
    const std::vector<float>& q = same ? base : queries;
    const int64_t n_q = same ? nb : nq;
    const Neighbours nn = nearest_neighbours(q, n_q, base, nb, dim, k, same);
    for (int64_t i = 0; i < n_q; ++i) {
      std::vector<std::pair<double, int64_t>> all;
      for (int64_t b = 0; b < nb; ++b) {
        if (same && b == i) continue;
        double s = 0;
        for (int64_t j = 0; j < dim; ++j) s += std::pow(static_cast<double>(q[static_cast<size_t>(i * dim + j)]) - base[static_cast<size_t>(b * dim + j)], 2);
        all.emplace_back(std::sqrt(s), b);
      }
      std::sort(all.begin(), all.end());
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(nn.index[static_cast<size_t>(i * k + j)], all[static_cast<size_t>(j)].second);
        EXPECT_NEAR(nn.distance[static_cast<size_t>(i * k + j)], all[static_cast<size_t>(j)].first, 1e-9);
      }
    }
  }
  EXPECT_THROW(nearest_neighbours(queries, nq, base, nb, dim, nb, true), Error);
}

}  // namespace
}  // namespace okapi::eval
