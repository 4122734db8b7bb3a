// exact/int_matmul: the int16 encoding and the exact dot products. The scalar kernel equals a
// plain int64 reference, and the AVX2 kernel (hi/lo split of _mm256_madd_epi16 pair sums) equals
// the scalar one bit for bit, including at the extremes of the overflow analysis.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <random>
#include <vector>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "exact/int_matmul.hpp"

namespace okapi::exact {
namespace {

std::vector<std::int16_t> random_int16(std::mt19937& rng, size_t n, int bound = kInt16EncodeMax) {
  std::uniform_int_distribution<int> d(-bound, bound);
  std::vector<std::int16_t> v(n);
  for (auto& x : v) x = static_cast<std::int16_t>(d(rng));
  return v;
}

// Independent reference: one product at a time, summed in int64 (no kernel code involved).
std::vector<std::int64_t> reference(const std::vector<std::int16_t>& w, const std::vector<std::int16_t>& x,
                                    std::int64_t n, std::int64_t n_tokens) {
  std::vector<std::int64_t> out(static_cast<size_t>(n_tokens));
  for (std::int64_t t = 0; t < n_tokens; ++t)
    for (std::int64_t i = 0; i < n; ++i)
      out[static_cast<size_t>(t)] += std::int64_t{w[static_cast<size_t>(i)]} * x[static_cast<size_t>(t * n + i)];
  return out;
}

void expect_all_kernels_equal_reference(const std::vector<std::int16_t>& w, const std::vector<std::int16_t>& x,
                                        std::int64_t n, std::int64_t n_tokens) {
  const auto want = reference(w, x, n, n_tokens);
  std::vector<std::int64_t> got(static_cast<size_t>(n_tokens));
  int16_dot_rows(w.data(), x.data(), n, n_tokens, n, got.data(), IntKernel::scalar);
  EXPECT_EQ(got, want) << "scalar n=" << n << " tokens=" << n_tokens;
  if (cpu_features().use_avx2()) {
    std::fill(got.begin(), got.end(), -1);
    int16_dot_rows(w.data(), x.data(), n, n_tokens, n, got.data(), IntKernel::avx2);
    EXPECT_EQ(got, want) << "avx2 n=" << n << " tokens=" << n_tokens;
  }
}

TEST(IntMatmul, RandomRowsAllKernelsEqualTheInt64Reference) {
  std::mt19937 rng(1);
  for (const std::int64_t n : {16, 32, 64, 176, 288, 768, 5632}) {
    for (const std::int64_t tokens : {1, 2, 3, 4, 5, 7, 9}) {
      const auto w = random_int16(rng, static_cast<size_t>(n));
      const auto x = random_int16(rng, static_cast<size_t>(n * tokens));
      expect_all_kernels_equal_reference(w, x, n, tokens);
    }
  }
}

TEST(IntMatmul, ExtremesAcrossTheInt32FlushBoundary) {
  // 2^19 + 48 elements: every AVX2 lane collects more than 32768 pair sums, so the hi/lo int32
  // accumulators must be flushed to int64 once; with |w| = |x| = 32767 each pair sum is the largest
  // (or most negative) value _mm256_madd_epi16 can produce from the encoding.
  const std::int64_t n = (std::int64_t{1} << 19) + 48;
  const std::int64_t tokens = 3;
  std::vector<std::int16_t> w(static_cast<size_t>(n), kInt16EncodeMax);
  std::vector<std::int16_t> x(static_cast<size_t>(n * tokens));
  for (std::int64_t i = 0; i < n; ++i) {
    x[static_cast<size_t>(i)] = kInt16EncodeMax;                                          // all +: max sum
    x[static_cast<size_t>(n + i)] = -kInt16EncodeMax;                                     // all -: min sum
    x[static_cast<size_t>(2 * n + i)] = static_cast<std::int16_t>(i % 3 == 0 ? -kInt16EncodeMax : kInt16EncodeMax);
  }
  expect_all_kernels_equal_reference(w, x, n, tokens);
  std::vector<std::int64_t> got(3);
  int16_dot_rows(w.data(), x.data(), n, tokens, n, got.data());
  EXPECT_EQ(got[0], n * 32767LL * 32767LL);
  EXPECT_EQ(got[1], -n * 32767LL * 32767LL);
}

// int16_matmul_rows: rows x tokens blocks (four rows against one token for decode, one row against
// four tokens for prefill), every shape of tail, against the reference; then the extremes across the
// 65536-element flush of the AVX2 lane sums.
void expect_matmul_rows_equal_reference(const std::vector<std::int16_t>& w, std::int64_t n_rows,
                                        const std::vector<std::int16_t>& x, std::int64_t n_tokens, std::int64_t n) {
  std::vector<std::int64_t> want(static_cast<size_t>(n_rows * n_tokens));
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const std::vector<std::int16_t> row(w.begin() + r * n, w.begin() + (r + 1) * n);
    const auto dots = reference(row, x, n, n_tokens);
    for (std::int64_t t = 0; t < n_tokens; ++t) want[static_cast<size_t>(r * n_tokens + t)] = dots[static_cast<size_t>(t)];
  }
  std::vector<IntKernel> kernels{IntKernel::scalar};
  if (cpu_features().use_avx2()) kernels.push_back(IntKernel::avx2);
  for (const IntKernel kernel : kernels) {
    std::vector<std::int64_t> got(want.size(), -1);
    int16_matmul_rows_kernel(kernel)(w.data(), n_rows, x.data(), n_tokens, n, got.data());
    EXPECT_EQ(got, want) << "kernel " << static_cast<int>(kernel) << " rows " << n_rows << " tokens " << n_tokens;
  }
}

TEST(IntMatmul, RowBlocksEqualTheReference) {
  std::mt19937 rng(2);
  for (const std::int64_t n : {16, 64, 176})
    for (const std::int64_t rows : {1, 3, 4, 5, 9})
      for (const std::int64_t tokens : {1, 2, 3, 4, 6}) {
        const auto w = random_int16(rng, static_cast<size_t>(n * rows));
        const auto x = random_int16(rng, static_cast<size_t>(n * tokens));
        expect_matmul_rows_equal_reference(w, rows, x, tokens, n);
      }
  const std::int64_t n = (std::int64_t{1} << 16) + 32;
  for (const auto& [rows, tokens] : {std::pair<std::int64_t, std::int64_t>{4, 1}, {1, 4}, {5, 2}}) {
    std::vector<std::int16_t> w(static_cast<size_t>(n * rows)), x(static_cast<size_t>(n * tokens));
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::int16_t>(i % 7 == 3 ? -kInt16EncodeMax : kInt16EncodeMax);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int16_t>(i < static_cast<size_t>(n) ? kInt16EncodeMax : -kInt16EncodeMax);
    expect_matmul_rows_equal_reference(w, rows, x, tokens, n);
  }
}

TEST(IntMatmul, RejectsUnpaddedRows) {
  std::vector<std::int16_t> w(20), x(20);
  std::int64_t out = 0;
  EXPECT_THROW(int16_dot_rows(w.data(), x.data(), 20, 1, 20, &out), okapi::Error);
}

TEST(IntMatmul, AskingForAvx2WithoutItThrows) {
  if (cpu_features().use_avx2()) {
    EXPECT_TRUE(int_kernel_uses_avx2(IntKernel::avx2));
    EXPECT_TRUE(int_kernel_uses_avx2(IntKernel::automatic));
  } else {
    EXPECT_THROW(int_kernel_uses_avx2(IntKernel::avx2), okapi::Error);
  }
  EXPECT_FALSE(int_kernel_uses_avx2(IntKernel::scalar));
}

TEST(EncodeRowInt16, MaxMapsTo32767AndErrorIsAtMostHalfAStep) {
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (const std::int64_t n : {1, 15, 16, 17, 288}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = d(rng);
    std::vector<std::int16_t> q(static_cast<size_t>(padded_row_length(n)), 99);
    const double s = encode_row_int16(x.data(), n, q.data(), "test row");
    double max_abs = 0;
    for (float v : x) max_abs = std::max(max_abs, std::fabs(static_cast<double>(v)));
    EXPECT_EQ(s, max_abs / 32767.0);
    int extreme = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double err = std::fabs(static_cast<double>(x[static_cast<size_t>(i)]) - s * q[static_cast<size_t>(i)]);
      EXPECT_LE(err, 0.5 * s * (1 + 1e-12)) << i;
      extreme = std::max(extreme, std::abs(int{q[static_cast<size_t>(i)]}));
    }
    EXPECT_EQ(extreme, kInt16EncodeMax);
    for (std::int64_t i = n; i < padded_row_length(n); ++i) EXPECT_EQ(q[static_cast<size_t>(i)], 0);
  }
}

TEST(EncodeRowInt16, Avx2EncodingEqualsScalar) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(4);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const std::int64_t n : {1, 7, 8, 9, 64, 172, 4099}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = d(rng) * (d(rng) > 1.5f ? 100.0f : 1.0f);
    for (std::int64_t i = 0; i < n; i += 5) x[static_cast<size_t>(i)] = std::round(x[static_cast<size_t>(i)]) + 0.5f;
    std::vector<std::int16_t> a(static_cast<size_t>(padded_row_length(n))), b(a.size());
    EXPECT_EQ(encode_row_int16(x.data(), n, a.data(), "row", IntKernel::scalar),
              encode_row_int16(x.data(), n, b.data(), "row", IntKernel::avx2));
    EXPECT_EQ(a, b) << n;
  }
}

TEST(EncodeRowInt16, ZeroRowAndHalfwayRounding) {
  std::vector<float> zero(16, 0.0f);
  std::vector<std::int16_t> q(16, 5);
  EXPECT_EQ(encode_row_int16(zero.data(), 16, q.data(), "zero"), 1.0);
  for (auto v : q) EXPECT_EQ(v, 0);
  // max = 32767 gives s = 1 exactly, so 2.5 -> 3 and -2.5 -> -3 (half away from zero).
  std::vector<float> x{32767.0f, 2.5f, -2.5f, 0.5f, -0.49f};
  std::vector<std::int16_t> r(16);
  EXPECT_EQ(encode_row_int16(x.data(), 5, r.data(), "halves"), 1.0);
  EXPECT_EQ(r[1], 3);
  EXPECT_EQ(r[2], -3);
  EXPECT_EQ(r[3], 1);
  EXPECT_EQ(r[4], 0);
}

TEST(EncodeRowInt16, NonFiniteValuesAreAnError) {
  std::vector<std::int16_t> q(16);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(12, 1.0f);
    x[10] = bad;  // past the first SIMD group of 8
    try {
      encode_row_int16(x.data(), 12, q.data(), "the input of 'blk.0.attn_q.weight'");
      FAIL() << "no error";
    } catch (const okapi::Error& e) {
      EXPECT_NE(std::string(e.what()).find("attn_q"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace okapi::exact
