// Dense linear algebra for compression and analysis, from LAPACK (LAPACKE + OpenBLAS): not a hot
// path, so okapi does not carry its own SVD.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "compress/unit.hpp"

namespace okapi::compress {

// OpenBLAS on one thread for small matrices: on a loaded machine its spinning threads cost ten
// times the work (measured: 10 s instead of 1.3 s for a 5M model's SVDs); on every core for a
// matrix of at least a million entries, where the threads pay. Every entry point below calls
// it; code using CBLAS directly calls use_single_threaded_blas().
void use_blas_threads_for(int64_t elements);
inline void use_single_threaded_blas() { use_blas_threads_for(0); }

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

// The thin SVD a = U diag(s) Vᵀ of a rows x cols row-major matrix: u is rows x k, vt is k x cols
// (row-major), k = min(rows, cols), s descending. With `vectors` false only s is computed.
struct ThinSvd {
  int64_t rows = 0, cols = 0, k = 0;
  std::vector<double> u, s, vt;
};
ThinSvd thin_svd(std::vector<double> a, int64_t rows, int64_t cols, bool vectors = true);

// A thin SVD's factors at `rank`, the singular values split evenly (a ≈ out · in): in = √Σ Vᵀ,
// rank x cols (row-major, in double: a metric's transform may still apply to it), and out = U √Σ
// as float, rank columns, cut into one block of rows per member of the unit `svd` factored the
// stacked members of.
std::vector<double> svd_in_factor(const ThinSvd& svd, int64_t rank);
std::vector<std::vector<float>> svd_out_factors(const ThinSvd& svd, const Unit& u, int64_t rank);

// The lower Cholesky factor L (n x n row-major, zeros above the diagonal) of a symmetric positive
// semi-definite matrix, L Lᵀ = c + δ·mean(diag c)·I: δ starts at `damping` and grows tenfold until
// the factorization succeeds (a calibration set rarely spans every input direction). Returns L
// and sets *damping_used to the δ that worked.
std::vector<double> cholesky_lower(std::vector<double> c, int64_t n, double damping, double* damping_used);

// y := y · L⁻¹ for a lower-triangular n x n L; y is rows x n, row-major.
void multiply_by_lower_inverse(std::span<const double> l, int64_t n, std::span<double> y, int64_t rows);

}  // namespace okapi::compress
