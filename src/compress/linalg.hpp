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

// The best rank-r approximation of the rows x cols row-major matrix `a` (Eckart–Young) as two
// factors, a ≈ out · in, with out rows x r and in r x cols (row-major), the singular values split
// evenly between them (out = U √Σ, in = √Σ Vᵀ). Also returns all singular values, descending.
struct LowRankFactors {
  int64_t rank = 0;
  std::vector<float> out, in;
  std::vector<double> sigma;
};
LowRankFactors truncated_svd(std::span<const float> a, int64_t rows, int64_t cols, int64_t rank);

}  // namespace okapi::compress
