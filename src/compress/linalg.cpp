#include "compress/linalg.hpp"

#include <lapacke.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace okapi::compress {

std::vector<double> singular_values(std::span<const float> a, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0 || static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) != a.size()) {
    throw_error("singular values: a {} x {} matrix needs {} values, got {}", rows, cols, rows * cols, a.size());
  }
  std::vector<double> m(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) throw_error("singular values: the matrix holds a non-finite value at entry {}", i);
    m[i] = a[i];
  }
  std::vector<double> s(static_cast<size_t>(std::min(rows, cols)));
  // Values only (jobz 'N'). The row-major matrix is its transpose in column-major order, which has
  // the same singular values and needs no copy (LAPACKE's row-major path transposes anyway).
  const lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', static_cast<lapack_int>(cols),
                                         static_cast<lapack_int>(rows), m.data(), static_cast<lapack_int>(cols),
                                         s.data(), nullptr, 1, nullptr, 1);
  if (info != 0) throw_error("singular values: LAPACK dgesdd failed (info {}) on a {} x {} matrix", info, rows, cols);
  return s;
}

}  // namespace okapi::compress
