// Dense linear algebra for compression and analysis, from LAPACK (LAPACKE + OpenBLAS): not a hot
// path, so okapi does not carry its own SVD.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace okapi::compress {

// The singular values of the rows x cols row-major matrix `a`, descending (min(rows, cols) of
// them). Throws okapi::Error for a bad shape, non-finite entries or a LAPACK failure.
std::vector<double> singular_values(std::span<const float> a, int64_t rows, int64_t cols);

}  // namespace okapi::compress
