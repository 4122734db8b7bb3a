#include "compress/linalg.hpp"

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

std::vector<double> singular_values(std::span<const float> a, int64_t rows, int64_t cols) {
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

LowRankFactors truncated_svd(std::span<const float> a, int64_t rows, int64_t cols, int64_t rank) {
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

}  // namespace okapi::compress
