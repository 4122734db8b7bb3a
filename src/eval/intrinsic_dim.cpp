#include "eval/intrinsic_dim.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "core/error.hpp"

namespace okapi::eval {

namespace {

void check_shape(std::span<const float> a, int64_t rows, int64_t dim, const char* what) {
  if (rows < 0 || dim < 1 || static_cast<uint64_t>(rows) * static_cast<uint64_t>(dim) != a.size()) {
    throw_error("{}: {} rows of {} need {} values, got {}", what, rows, dim, rows * dim, a.size());
  }
}

double squared_distance(const float* a, const float* b, int64_t dim) {
  double s = 0;
  for (int64_t i = 0; i < dim; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return s;
}

}  // namespace

Neighbours nearest_neighbours(std::span<const float> queries, int64_t n_queries, std::span<const float> base,
                              int64_t n_base, int64_t dim, int64_t k, bool exclude_same_row) {
  check_shape(queries, n_queries, dim, "nearest neighbours");
  check_shape(base, n_base, dim, "nearest neighbours");
  const int64_t available = n_base - (exclude_same_row ? 1 : 0);
  if (k < 1 || k > available) throw_error("nearest neighbours: {} of {} points asked for", k, available);
  Neighbours out;
  out.k = k;
  out.index.assign(static_cast<size_t>(n_queries * k), -1);
  out.distance.assign(static_cast<size_t>(n_queries * k), 0.0);

  // ‖q − b‖² = ‖q‖² + ‖b‖² − 2 q·b, the dot products by blocks of queries in one sgemm each. In
  // float this only ranks candidates (cancellation makes it inexact for close points, less so
  // after centring both sets on the base's mean), so each query keeps a few more than k and the
  // chosen distances are recomputed exactly from the original rows.
  std::vector<double> mean(static_cast<size_t>(dim), 0.0);
  for (int64_t b = 0; b < n_base; ++b)
    for (int64_t i = 0; i < dim; ++i) mean[static_cast<size_t>(i)] += base[static_cast<size_t>(b * dim + i)];
  for (double& m : mean) m /= static_cast<double>(std::max<int64_t>(1, n_base));
  const auto centred = [&](std::span<const float> a) {
    std::vector<float> c(a.size());
    for (size_t j = 0; j < a.size(); ++j) c[j] = static_cast<float>(a[j] - mean[j % static_cast<size_t>(dim)]);
    return c;
  };
  const std::vector<float> base_c = centred(base), queries_c = centred(queries);
  std::vector<float> base_norm(static_cast<size_t>(n_base));
  for (int64_t b = 0; b < n_base; ++b) {
    double s = 0;
    for (int64_t i = 0; i < dim; ++i) s += static_cast<double>(base_c[static_cast<size_t>(b * dim + i)]) * base_c[static_cast<size_t>(b * dim + i)];
    base_norm[static_cast<size_t>(b)] = static_cast<float>(s);
  }
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(256, (int64_t{1} << 24) / std::max<int64_t>(1, n_base)));
  const int64_t keep = std::min(available, k + 8);
  std::vector<float> dots(static_cast<size_t>(block * n_base));
  std::vector<std::pair<double, int64_t>> candidates;
  for (int64_t q0 = 0; q0 < n_queries; q0 += block) {
    const int64_t nq = std::min(block, n_queries - q0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(nq), static_cast<blasint>(n_base),
                static_cast<blasint>(dim), 1.0f, queries_c.data() + q0 * dim, static_cast<blasint>(dim), base_c.data(),
                static_cast<blasint>(dim), 0.0f, dots.data(), static_cast<blasint>(n_base));
    for (int64_t qi = 0; qi < nq; ++qi) {
      const int64_t q = q0 + qi;
      candidates.clear();
      for (int64_t b = 0; b < n_base; ++b) {
        if (exclude_same_row && b == q) continue;
        candidates.emplace_back(base_norm[static_cast<size_t>(b)] - 2.0 * dots[static_cast<size_t>(qi * n_base + b)], b);
      }
      std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end());
      candidates.resize(static_cast<size_t>(keep));
      for (auto& [d, b] : candidates) d = squared_distance(queries.data() + q * dim, base.data() + b * dim, dim);
      std::sort(candidates.begin(), candidates.end());
      for (int64_t j = 0; j < k; ++j) {
        out.index[static_cast<size_t>(q * k + j)] = candidates[static_cast<size_t>(j)].second;
        out.distance[static_cast<size_t>(q * k + j)] = std::sqrt(candidates[static_cast<size_t>(j)].first);
      }
    }
  }
  return out;
}

double two_nn_dimension(std::span<const float> points, int64_t n, int64_t dim, int64_t* used) {
  check_shape(points, n, dim, "TwoNN");
  // Exact duplicates (the same token embedding at layer 0, say) have r₁ = 0 and no ratio.
  std::vector<float> distinct;
  std::unordered_map<std::string_view, int64_t> seen;
  distinct.reserve(points.size());
  int64_t n_distinct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::string_view bytes(reinterpret_cast<const char*>(points.data() + i * dim), static_cast<size_t>(dim) * sizeof(float));
    if (!seen.emplace(bytes, i).second) continue;
    distinct.insert(distinct.end(), points.begin() + i * dim, points.begin() + (i + 1) * dim);
    ++n_distinct;
  }
  if (used != nullptr) *used = n_distinct;
  if (n_distinct < 3) return 0;
  const Neighbours nn = nearest_neighbours(distinct, n_distinct, distinct, n_distinct, dim, 2, true);
  std::vector<double> log_mu;
  for (int64_t i = 0; i < n_distinct; ++i) {
    const double r1 = nn.distance[static_cast<size_t>(2 * i)], r2 = nn.distance[static_cast<size_t>(2 * i + 1)];
    if (r1 > 0) log_mu.push_back(std::log(r2 / r1));
  }
  std::sort(log_mu.begin(), log_mu.end());
  const size_t m = log_mu.size();
  const size_t fitted = static_cast<size_t>(std::floor(0.9 * static_cast<double>(m)));
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < fitted; ++i) {
    const double f = static_cast<double>(i + 1) / static_cast<double>(m);  // empirical F at the (i+1)-th smallest μ
    const double y = -std::log(1.0 - f);
    sxy += log_mu[i] * y;
    sxx += log_mu[i] * log_mu[i];
  }
  return sxx > 0 ? sxy / sxx : 0.0;
}

IntrinsicDimension intrinsic_dimension(std::span<const float> points, int64_t n, int64_t dim) {
  IntrinsicDimension out;
  out.two_nn = two_nn_dimension(points, n, dim, &out.points);
  std::vector<float> quarter;
  for (int64_t i = 0; i < n; i += 4) quarter.insert(quarter.end(), points.begin() + i * dim, points.begin() + (i + 1) * dim);
  out.two_nn_quarter = two_nn_dimension(quarter, static_cast<int64_t>(quarter.size()) / dim, dim);
  if (n < 2) return out;
  // Covariance (dim x dim) of the centred points, its eigenvalues by LAPACK.
  std::vector<double> mean(static_cast<size_t>(dim), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) mean[static_cast<size_t>(j)] += points[static_cast<size_t>(i * dim + j)];
  for (double& m : mean) m /= static_cast<double>(n);
  std::vector<double> centred(static_cast<size_t>(n * dim));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j)
      centred[static_cast<size_t>(i * dim + j)] = points[static_cast<size_t>(i * dim + j)] - mean[static_cast<size_t>(j)];
  std::vector<double> cov(static_cast<size_t>(dim * dim), 0.0);
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<blasint>(dim), static_cast<blasint>(n), 1.0,
              centred.data(), static_cast<blasint>(dim), 0.0, cov.data(), static_cast<blasint>(dim));
  std::vector<double> eigen(static_cast<size_t>(dim));
  const lapack_int info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'N', 'U', static_cast<lapack_int>(dim), cov.data(),
                                         static_cast<lapack_int>(dim), eigen.data());
  if (info != 0) throw_error("intrinsic dimension: LAPACK dsyevd failed (info {}) on {} x {}", info, dim, dim);
  std::sort(eigen.begin(), eigen.end(), std::greater<>());
  for (double& e : eigen) e = std::max(0.0, e);
  const double total = std::accumulate(eigen.begin(), eigen.end(), 0.0);
  if (total <= 0) return out;
  double squares = 0, kept = 0;
  for (size_t i = 0; i < eigen.size(); ++i) {
    squares += eigen[i] * eigen[i];
    kept += eigen[i];
    if (out.pca_90 == 0 && kept >= 0.90 * total) out.pca_90 = static_cast<int64_t>(i + 1);
    if (out.pca_99 == 0 && kept >= 0.99 * total) out.pca_99 = static_cast<int64_t>(i + 1);
  }
  if (out.pca_99 == 0) out.pca_99 = dim;  // rounding at the very end
  if (out.pca_90 == 0) out.pca_90 = out.pca_99;
  out.participation_ratio = total * total / squares;
  return out;
}

}  // namespace okapi::eval
