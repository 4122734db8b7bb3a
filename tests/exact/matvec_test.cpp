// Z[w] matvec: scalar int64 / int128 / AVX2 kernels agree bit for bit within the overflow
// analysis, the accumulator picker follows 42 n A B <= 2^(L-1) - 1, and the Frobenius shim is
// the identity wherever the analysis allows it.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "exact/frobenius.hpp"
#include "exact/matvec.hpp"

namespace okapi::exact {
namespace {

std::vector<std::int64_t> random_parts(std::mt19937_64& rng, std::size_t count, std::int64_t bound) {
  std::uniform_int_distribution<std::int64_t> d(-bound, bound);
  std::vector<std::int64_t> v(count);
  for (auto& p : v) p = d(rng);
  return v;
}

ZMatrix random_matrix(std::mt19937_64& rng, std::size_t rows, std::size_t cols, std::int64_t bound) {
  return {rows, cols, random_parts(rng, 2 * rows * cols, bound)};
}

// Independent reference: checked ring arithmetic, element by element.
std::vector<ZOmegaWide> ring_reference(const ZMatrix& w, std::span<const std::int64_t> x) {
  std::vector<ZOmegaWide> y(w.rows);
  for (std::size_t r = 0; r < w.rows; ++r) {
    for (std::size_t k = 0; k < w.cols; ++k) {
      const ZOmega t = mul({w.parts[2 * (r * w.cols + k)], w.parts[2 * (r * w.cols + k) + 1]}, {x[2 * k], x[2 * k + 1]});
      y[r].a += t.a;
      y[r].b += t.b;
    }
  }
  return y;
}

TEST(OverflowAnalysisTest, PickerFollowsTheBoundFormulas) {
  constexpr std::uint64_t k15 = 1ULL << 15, k20 = 1ULL << 20, k31 = 1ULL << 31;
  // int64 holds iff 42 n A B <= 2^63 - 1.
  const std::size_t n15 = static_cast<std::size_t>(static_cast<UInt128>(INT64_MAX) / (42 * k15 * k15));
  EXPECT_EQ(n15, 204522252u);
  EXPECT_EQ(pick_zomega_accumulator(k15, k15, n15), Accumulator::int64);
  EXPECT_EQ(pick_zomega_accumulator(k15, k15, n15 + 1), Accumulator::int128);
  const std::size_t n20 = static_cast<std::size_t>(static_cast<UInt128>(INT64_MAX) / (42 * k20 * k20));
  EXPECT_EQ(n20, 199728u);
  EXPECT_EQ(pick_zomega_accumulator(k20, k20, n20), Accumulator::int64);
  EXPECT_EQ(pick_zomega_accumulator(k20, k20, n20 + 1), Accumulator::int128);
  // |parts| up to 2^31 (the seed's "safe" int32 range): one term already needs 42 * 2^62 > 2^63.
  EXPECT_EQ(pick_zomega_accumulator(k31, k31, 1), Accumulator::int128);
  EXPECT_EQ(pick_zomega_accumulator(k31 - 1, k31 - 1, 1), Accumulator::int128);
  EXPECT_EQ(pick_zomega_accumulator(1ULL << 29, 1ULL << 29, 1), Accumulator::int128);  // 42 * 2^58 > 2^63
  EXPECT_EQ(pick_zomega_accumulator(1ULL << 28, 1ULL << 28, 3), Accumulator::int64);   // 126 * 2^56 < 2^63
  EXPECT_EQ(pick_zomega_accumulator(1ULL << 28, 1ULL << 28, 4), Accumulator::int128);  // 168 * 2^56 > 2^63
  // int128 fails only for huge operands: 42 n A B > 2^127 - 1.
  EXPECT_EQ(pick_zomega_accumulator(1ULL << 60, 1ULL << 60, 3), Accumulator::int128);  // 126 * 2^120 < 2^127
  EXPECT_THROW(pick_zomega_accumulator(1ULL << 60, 1ULL << 60, 4), Error);            // 168 * 2^120 > 2^127
  EXPECT_THROW(pick_zomega_accumulator(1ULL << 62, 1ULL << 62, 1), Error);            // 42 * 2^124 > 2^127
  EXPECT_THROW(pick_zomega_accumulator(1ULL << 63, 1ULL << 63, 1), Error);
  try {
    pick_zomega_accumulator(1ULL << 63, 1ULL << 63, 1000);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no accumulator is exact"), std::string::npos) << e.what();
  }
  // Integer dot through the NTT: 60-bit prime first, then the dual-prime CRT.
  EXPECT_EQ(pick_ntt_accumulator(1 << 15, 1 << 15, 4096), Accumulator::ntt60);
  EXPECT_EQ(pick_ntt_accumulator(1ULL << 23, 1ULL << 23, 4096), Accumulator::ntt60);  // 2^58 <= (q-1)/2
  EXPECT_EQ(pick_ntt_accumulator(1ULL << 23, 1ULL << 24, 4000), Accumulator::crt);    // 5.63e17: > (q-1)/2, < (q1q2-1)/2
  EXPECT_THROW(pick_ntt_accumulator(1ULL << 23, 1ULL << 24, 4096), Error);            // 2^59 > (q1q2-1)/2 = 5.756e17
  EXPECT_THROW(pick_ntt_accumulator(1ULL << 24, 1ULL << 24, 4096), Error);            // 2^60
}

void expect_kernels_agree(const ZMatrix& w, std::span<const std::int64_t> x) {
  const std::vector<ZOmegaWide> reference = ring_reference(w, x);
  EXPECT_EQ(matvec(w, x, MatVecKernel::scalar), reference);
  EXPECT_EQ(matvec(w, x, MatVecKernel::automatic), reference);
  if (cpu_features().use_avx2()) {
    EXPECT_EQ(matvec(w, x, MatVecKernel::avx2), reference);
  }
}

TEST(MatVecTest, Avx2BitIdenticalToScalarReference) {
  std::mt19937_64 rng(5);
  for (std::size_t cols : {1u, 2u, 3u, 7u, 64u, 65u, 255u}) {
    for (std::int64_t bound : {1LL, 1LL << 15, 1LL << 20}) {
      const ZMatrix w = random_matrix(rng, 9, cols, bound);
      const std::vector<std::int64_t> x = random_parts(rng, 2 * cols, bound);
      expect_kernels_agree(w, x);
    }
  }
}

TEST(MatVecTest, BoundaryOperandsAtTheInt64Limit) {
  // All parts at +-A with the largest n the int64 analysis allows: the sum reaches the bound.
  constexpr std::int64_t a = (1LL << 29) - 1;
  const std::size_t n = static_cast<std::size_t>(static_cast<UInt128>(INT64_MAX) / (42 * static_cast<UInt128>(a) * a));
  ASSERT_EQ(pick_zomega_accumulator(a, a, n), Accumulator::int64);
  ZMatrix w{2, n, std::vector<std::int64_t>(2 * 2 * n)};
  std::vector<std::int64_t> x(2 * n);
  for (std::size_t k = 0; k < n; ++k) {
    w.parts[2 * k] = a;            // row 0: a = +A, b = -A, x: c = +A, d = +A -> ac - 41bd = 42 A^2
    w.parts[2 * k + 1] = -a;
    w.parts[2 * (n + k)] = -a;     // row 1: all -A
    w.parts[2 * (n + k) + 1] = -a;
    x[2 * k] = a;
    x[2 * k + 1] = a;
  }
  const std::vector<ZOmegaWide> y = matvec(w, x);
  EXPECT_EQ(y[0].a, static_cast<Int128>(n) * 42 * a * a);
  expect_kernels_agree(w, x);
}

TEST(MatVecTest, Int128PathWhenInt64SumsWouldOverflow) {
  std::mt19937_64 rng(6);
  // Parts fit int32 (so only the accumulator bound rules AVX2 out) and one term fits int64.
  const ZMatrix w = random_matrix(rng, 5, 33, INT64_C(1) << 28);
  const std::vector<std::int64_t> x = random_parts(rng, 66, INT64_C(1) << 28);
  ASSERT_EQ(pick_zomega_accumulator(max_abs_part(w.parts), max_abs_part(x), 33), Accumulator::int128);
  EXPECT_EQ(matvec(w, x), ring_reference(w, x));
  EXPECT_THROW(matvec(w, x, MatVecKernel::avx2), Error);
  const ZMatrix bad{2, 3, std::vector<std::int64_t>(5)};
  EXPECT_THROW(matvec(bad, x), Error);
}

// Seed 000's shuffle, _MM_SHUFFLE(2,3,0,1), swaps the 32-bit halves inside each 64-bit lane; on
// (c, d) stored as int64 that turns c into its sign word (0 or -1), not into d. Emulated here.
TEST(MatVecTest, SeedShuffleConstantDoesNotGiveCrossTerms) {
  const std::int64_t c = 5, d = 7, a = 3;
  const auto low32 = [](std::int64_t v) { return static_cast<std::int64_t>(static_cast<std::int32_t>(v & 0xffffffff)); };
  const auto swap_halves = [](std::int64_t v) {
    const auto u = static_cast<std::uint64_t>(v);
    return static_cast<std::int64_t>((u << 32) | (u >> 32));
  };
  EXPECT_EQ(low32(a) * low32(swap_halves(c)), 0);  // seed: a * hi32(c), not a * d
  EXPECT_NE(low32(a) * low32(swap_halves(c)), a * d);
}

TEST(FrobeniusShimTest, BitIdenticalForEveryAllowedExponentAndClearErrorBeyond) {
  std::mt19937_64 rng(7);
  const ZMatrix w = random_matrix(rng, 6, 40, 1 << 15);
  const std::vector<std::int64_t> x = random_parts(rng, 80, 1 << 15);
  const std::vector<ZOmega> plain = matvec_narrow(w, x);
  for (FrobeniusPrime p : {FrobeniusPrime::split41, FrobeniusPrime::inert2}) {
    int exact = 0, via_int128 = 0, refused = 0;
    for (unsigned k = 0; k <= 64; ++k) {
      // Prediction from the analysis alone: the shim must not overflow int64 and 42 n A' B must fit.
      bool allowed = true;
      Accumulator acc = Accumulator::int64;
      ShimmedMatrix s;
      try {
        s = frobenius_shim(w, p, k);
        acc = pick_zomega_accumulator(s.max_abs, max_abs_part(x), w.cols);
      } catch (const Error&) {
        allowed = false;
      }
      if (allowed) {
        ASSERT_EQ(matvec_unshim(s, x), plain) << "k = " << k;
        if (cpu_features().use_avx2() && acc == Accumulator::int64 && s.max_abs < (1ULL << 31)) {
          ASSERT_EQ(matvec_unshim(s, x, MatVecKernel::avx2), plain) << "k = " << k;
        }
        ++exact;
        via_int128 += acc == Accumulator::int128;
      } else {
        EXPECT_THROW(matvec_unshim(frobenius_shim(w, p, k), x), Error) << "k = " << k;
        ++refused;
      }
    }
    std::cout << "p = " << (p == FrobeniusPrime::split41 ? 41 : 2) << ": exact for " << exact << " exponents (" << via_int128
              << " through int128), refused " << refused << " of k = 0..64\n";
    EXPECT_GT(exact, 3);
    EXPECT_GT(via_int128, 0);
    EXPECT_GT(refused, 0);
  }
  // The seed's configuration: pi_41^8 on 16-bit weights and activations, n = 40.
  const ShimmedMatrix s8 = frobenius_shim(w, FrobeniusPrime::split41, 8);
  EXPECT_EQ(s8.factor, power({0, 1}, 8));
  EXPECT_EQ(matvec_unshim(s8, x), plain);
}

TEST(FrobeniusShimTest, ErrorMessagesNameTheLimit) {
  const ZMatrix w{1, 2, {1LL << 40, 3, -5, 1LL << 40}};
  const std::vector<std::int64_t> x = {1LL << 62, 1, 2, 1LL << 62};
  try {
    matvec_unshim(frobenius_shim(w, FrobeniusPrime::inert2, 22), x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds 2^127 - 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(frobenius_shim(w, FrobeniusPrime::inert2, 23), Error);  // 2^63 leaves int64
}

}  // namespace
}  // namespace okapi::exact
