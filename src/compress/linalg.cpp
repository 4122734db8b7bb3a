#include "compress/linalg.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace okapi::compress {

namespace {
// The row-major matrix as doubles, refusing non-finite entries.
std::vector<double> to_doubles(std::span<const float> a, int64_t rows, int64_t cols, const char* what) {
  if (rows <= 0 || cols <= 0 || static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) != a.size()) {
    throw_error("{}: a {} x {} matrix needs {} values, got {}", what, rows, cols, rows * cols, a.size());
  }
  std::vector<double> m(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) throw_error("{}: the matrix holds a non-finite value at entry {}", what, i);
    m[i] = a[i];
  }
  return m;
}
}  // namespace

void use_blas_threads_for(int64_t elements) {
  static const int all = openblas_get_num_threads();
  static int current = -1;
  const int wanted = elements >= (int64_t{1} << 20) ? all : 1;
  if (wanted != current) {
    openblas_set_num_threads(wanted);
    current = wanted;
  }
}

std::vector<double> singular_values(std::span<const float> a, int64_t rows, int64_t cols) {
  use_blas_threads_for(rows * cols);
  std::vector<double> m = to_doubles(a, rows, cols, "singular values");
  std::vector<double> s(static_cast<size_t>(std::min(rows, cols)));
  // Values only (jobz 'N'). The row-major matrix is its transpose in column-major order, which has
  // the same singular values and needs no copy (LAPACKE's row-major path transposes anyway).
  const lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', static_cast<lapack_int>(cols),
                                         static_cast<lapack_int>(rows), m.data(), static_cast<lapack_int>(cols),
                                         s.data(), nullptr, 1, nullptr, 1);
  if (info != 0) throw_error("singular values: LAPACK dgesdd failed (info {}) on a {} x {} matrix", info, rows, cols);
  return s;
}

std::vector<double> svd_in_factor(const ThinSvd& svd, int64_t rank) {
  const auto r = static_cast<size_t>(rank), cols = static_cast<size_t>(svd.cols);
  std::vector<double> in(r * cols);
  for (size_t i = 0; i < r; ++i) {
    const double root = std::sqrt(svd.s[i]);
    for (size_t j = 0; j < cols; ++j) in[i * cols + j] = svd.vt[i * cols + j] * root;
  }
  return in;
}

std::vector<std::vector<float>> svd_out_factors(const ThinSvd& svd, const Unit& u, int64_t rank) {
  const auto r = static_cast<size_t>(rank), k = static_cast<size_t>(svd.k);
  std::vector<std::vector<float>> outs;
  size_t row0 = 0;
  for (const gguf::TensorInfo* m : u.members) {
    const auto rows = static_cast<size_t>(m->shape[1]);
    std::vector<float> out(rows * r);
    for (size_t o = 0; o < rows; ++o)
      for (size_t i = 0; i < r; ++i) out[o * r + i] = static_cast<float>(svd.u[(row0 + o) * k + i] * std::sqrt(svd.s[i]));
    outs.push_back(std::move(out));
    row0 += rows;
  }
  return outs;
}

LowRankFactors truncated_svd(std::span<const float> a, int64_t rows, int64_t cols, int64_t rank) {
  use_blas_threads_for(rows * cols);
  std::vector<double> m = to_doubles(a, rows, cols, "truncated SVD");
  const int64_t k = std::min(rows, cols);
  if (rank < 1 || rank > k) throw_error("truncated SVD: rank {} of a {} x {} matrix must be in [1, {}]", rank, rows, cols, k);
  // Column-major, `m` is aᵀ (cols x rows): aᵀ = U' S V'ᵀ, so a = V' S U'ᵀ. The left singular
  // vectors of a are the rows of V'ᵀ, its right ones the columns of U'.
  std::vector<double> s(static_cast<size_t>(k)), u(static_cast<size_t>(cols * k)), vt(static_cast<size_t>(k * rows));
  const lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', static_cast<lapack_int>(cols),
                                         static_cast<lapack_int>(rows), m.data(), static_cast<lapack_int>(cols),
                                         s.data(), u.data(), static_cast<lapack_int>(cols), vt.data(),
                                         static_cast<lapack_int>(k));
  if (info != 0) throw_error("truncated SVD: LAPACK dgesdd failed (info {}) on a {} x {} matrix", info, rows, cols);
  LowRankFactors f;
  f.rank = rank;
  f.out.resize(static_cast<size_t>(rows * rank));
  f.in.resize(static_cast<size_t>(rank * cols));
  for (int64_t i = 0; i < rank; ++i) {
    const double root = std::sqrt(s[static_cast<size_t>(i)]);
    for (int64_t o = 0; o < rows; ++o) {
      f.out[static_cast<size_t>(o * rank + i)] = static_cast<float>(vt[static_cast<size_t>(i + o * k)] * root);
    }
    for (int64_t c = 0; c < cols; ++c) {
      f.in[static_cast<size_t>(i * cols + c)] = static_cast<float>(u[static_cast<size_t>(c + i * cols)] * root);
    }
  }
  f.sigma = std::move(s);
  return f;
}

ThinSvd thin_svd(std::vector<double> a, int64_t rows, int64_t cols, bool vectors) {
  use_blas_threads_for(rows * cols);
  if (rows <= 0 || cols <= 0 || static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) != a.size()) {
    throw_error("SVD: a {} x {} matrix needs {} values, got {}", rows, cols, rows * cols, a.size());
  }
  for (size_t i = 0; i < a.size(); ++i)
    if (!std::isfinite(a[i])) throw_error("SVD: the matrix holds a non-finite value at entry {}", i);
  ThinSvd r;
  r.rows = rows;
  r.cols = cols;
  r.k = std::min(rows, cols);
  r.s.resize(static_cast<size_t>(r.k));
  // Column-major, `a` is aᵀ = U' S V'ᵀ, so a = V' S U'ᵀ: LAPACK's V'ᵀ buffer (k x rows,
  // column-major) is a's U row-major, and its U' buffer (cols x k) is a's Vᵀ row-major.
  if (vectors) {
    r.u.resize(static_cast<size_t>(rows * r.k));
    r.vt.resize(static_cast<size_t>(r.k * cols));
  }
  const lapack_int info = LAPACKE_dgesdd(
      LAPACK_COL_MAJOR, vectors ? 'S' : 'N', static_cast<lapack_int>(cols), static_cast<lapack_int>(rows), a.data(),
      static_cast<lapack_int>(cols), r.s.data(), vectors ? r.vt.data() : nullptr, static_cast<lapack_int>(cols),
      vectors ? r.u.data() : nullptr, static_cast<lapack_int>(r.k));
  if (info != 0) throw_error("SVD: LAPACK dgesdd failed (info {}) on a {} x {} matrix", info, rows, cols);
  return r;
}

std::vector<double> cholesky_lower(std::vector<double> c, int64_t n, double damping, double* damping_used) {
  use_blas_threads_for(n * n);
  if (n <= 0 || c.size() != static_cast<size_t>(n * n)) throw_error("Cholesky: a {} x {} matrix needs {} values", n, n, n * n);
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) mean_diag += c[static_cast<size_t>(i * n + i)];
  mean_diag = mean_diag > 0 ? mean_diag / static_cast<double>(n) : 1.0;
  for (double delta = damping; delta <= 1.0; delta *= 10) {
    std::vector<double> l = c;
    for (int64_t i = 0; i < n; ++i) l[static_cast<size_t>(i * n + i)] += delta * mean_diag;
    if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', static_cast<lapack_int>(n), l.data(), static_cast<lapack_int>(n)) == 0) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j) l[static_cast<size_t>(i * n + j)] = 0.0;
      if (damping_used) *damping_used = delta;
      return l;
    }
  }
  throw_error("Cholesky: the {} x {} input second moment is not positive definite even with damping", n, n);
}

void multiply_by_lower_inverse(std::span<const double> l, int64_t n, std::span<double> y, int64_t rows) {
  use_blas_threads_for(rows * n);
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasNoTrans, CblasNonUnit, static_cast<blasint>(rows),
              static_cast<blasint>(n), 1.0, l.data(), static_cast<blasint>(n), y.data(), static_cast<blasint>(n));
}

}  // namespace okapi::compress
