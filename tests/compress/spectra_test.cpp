// The spectra behind okapi analyze and compress: LAPACK's singular values on matrices whose
// spectrum is known, the summary ranks on spectra where they are known, tensor-name parsing, and
// clear errors for shapes and values LAPACK must not see.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compress/linalg.hpp"
#include "compress/spectra.hpp"
#include "core/error.hpp"

namespace okapi::compress {
namespace {

// Q D Rᵀ for random orthogonal Q (rows x k) and R (cols x k) from Gram–Schmidt, D = diag(sigma).
std::vector<float> with_spectrum(int64_t rows, int64_t cols, const std::vector<double>& sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g;
  const auto orthonormal = [&](int64_t n, int64_t k) {
    std::vector<double> q(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t i = 0; i < n; ++i) q[static_cast<size_t>(i * k + j)] = g(rng);
      for (int pass = 0; pass < 2; ++pass) {
        for (int64_t p = 0; p < j; ++p) {
          double dot = 0;
          for (int64_t i = 0; i < n; ++i) dot += q[static_cast<size_t>(i * k + j)] * q[static_cast<size_t>(i * k + p)];
          for (int64_t i = 0; i < n; ++i) q[static_cast<size_t>(i * k + j)] -= dot * q[static_cast<size_t>(i * k + p)];
        }
      }
      double norm = 0;
      for (int64_t i = 0; i < n; ++i) norm += std::pow(q[static_cast<size_t>(i * k + j)], 2);
      for (int64_t i = 0; i < n; ++i) q[static_cast<size_t>(i * k + j)] /= std::sqrt(norm);
    }
    return q;
  };
  const auto k = static_cast<int64_t>(sigma.size());
  const auto q = orthonormal(rows, k), r = orthonormal(cols, k);
  std::vector<float> a(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double v = 0;
      for (int64_t p = 0; p < k; ++p) v += q[static_cast<size_t>(i * k + p)] * sigma[static_cast<size_t>(p)] * r[static_cast<size_t>(j * k + p)];
      a[static_cast<size_t>(i * cols + j)] = static_cast<float>(v);
    }
  }
  return a;
}

TEST(SingularValues, RecoverAKnownSpectrumInEitherOrientation) {
  const std::vector<double> sigma = {9, 5, 2, 1, 0.5};
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{40, 12}, {12, 40}, {16, 16}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const auto s = singular_values(with_spectrum(rows, cols, sigma, 3), rows, cols);
    ASSERT_EQ(s.size(), static_cast<size_t>(std::min(rows, cols)));
    for (size_t i = 0; i < sigma.size(); ++i) EXPECT_NEAR(s[i], sigma[i], 1e-5) << i;
    for (size_t i = sigma.size(); i < s.size(); ++i) EXPECT_LT(s[i], 1e-5) << i;  // rank 5
  }
}

TEST(SingularValues, RefuseBadShapesAndNonFiniteValues) {
  std::vector<float> a(6, 1.0f);
  EXPECT_THROW((void)singular_values(a, 2, 2), Error);
  EXPECT_THROW((void)singular_values(a, 0, 6), Error);
  a[4] = std::nanf("");
  EXPECT_THROW((void)singular_values(a, 2, 3), Error);
}

TEST(Spectrum, SummaryRanks) {
  // Flat spectrum of 64: effective and stable rank 64, 90% of the energy needs 58 values.
  const MatrixSpectrum flat = summarize_spectrum("blk.7.ffn_up.weight", 64, 100, std::vector<double>(64, 2.0));
  EXPECT_EQ(flat.layer, 7);
  EXPECT_EQ(flat.kind, "ffn_up");
  EXPECT_NEAR(flat.effective_rank, 64.0, 1e-9);
  EXPECT_NEAR(flat.stable_rank, 64.0, 1e-9);
  EXPECT_EQ(flat.rank_90, 58);
  EXPECT_EQ(flat.rank_99, 64);
  // One dominant value: everything near 1.
  std::vector<double> spiky(32, 1e-3);
  spiky[0] = 10;
  const MatrixSpectrum one = summarize_spectrum("output.weight", 32, 32, spiky);
  EXPECT_EQ(one.layer, -1);
  EXPECT_EQ(one.kind, "output");
  EXPECT_LT(one.effective_rank, 1.05);
  EXPECT_NEAR(one.stable_rank, 1.0, 1e-6);
  EXPECT_EQ(one.rank_90, 1);
  EXPECT_EQ(one.rank_99, 1);
  // The zero matrix has rank 0 by every measure.
  const MatrixSpectrum zero = summarize_spectrum("blk.0.attn_q.weight", 8, 8, std::vector<double>(8, 0.0));
  EXPECT_EQ(zero.effective_rank, 0.0);
  EXPECT_EQ(zero.rank_99, 0);
}

TEST(Spectrum, TensorNames) {
  EXPECT_EQ(layer_and_kind("blk.12.attn_output.weight"), (std::pair<int64_t, std::string>{12, "attn_output"}));
  EXPECT_EQ(layer_and_kind("token_embd.weight"), (std::pair<int64_t, std::string>{-1, "token_embd"}));
  EXPECT_EQ(layer_and_kind("blk.x.attn_q.weight"), (std::pair<int64_t, std::string>{-1, "blk.x.attn_q"}));
  EXPECT_EQ(layer_and_kind("blk.99999999999999999999.attn_q.weight").first, -1);  // no overflow
}

TEST(TruncatedSvd, FactorsAreTheBestRankRApproximation) {
  const int64_t rows = 30, cols = 20;
  const std::vector<double> sigma = {8, 4, 2, 1, 0.5};
  const auto a = with_spectrum(rows, cols, sigma, 11);
  for (const int64_t rank : {5, 3}) {
    const LowRankFactors f = truncated_svd(a, rows, cols, rank);
    ASSERT_EQ(f.out.size(), static_cast<size_t>(rows * rank));
    ASSERT_EQ(f.in.size(), static_cast<size_t>(rank * cols));
    double err = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        double v = 0;
        for (int64_t p = 0; p < rank; ++p) v += f.out[static_cast<size_t>(i * rank + p)] * f.in[static_cast<size_t>(p * cols + j)];
        err += std::pow(v - a[static_cast<size_t>(i * cols + j)], 2);
      }
    }
    // Eckart–Young: the Frobenius error is the norm of the dropped singular values.
    double dropped = 0;
    for (size_t p = static_cast<size_t>(rank); p < sigma.size(); ++p) dropped += sigma[p] * sigma[p];
    EXPECT_NEAR(std::sqrt(err), std::sqrt(dropped), 1e-4) << rank;
  }
  EXPECT_THROW((void)truncated_svd(a, rows, cols, 0), Error);
  EXPECT_THROW((void)truncated_svd(a, rows, cols, 21), Error);
}

}  // namespace
}  // namespace okapi::compress
