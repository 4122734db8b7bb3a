// exact/detmath: the deterministic exp / log / sin / cos / tanh / pow / rsqrt against glibc's libm
// over wide ranges (glibc's double functions are accurate to within about 1 ulp, so the bounds
// below are the functions' own error plus libm's). The bit-for-bit cross-build guarantee itself is
// checked by runtime/exact_identity_test (same logits digest under gcc, clang, -O0, -O2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "exact/detmath.hpp"

namespace okapi::exact {
namespace {

constexpr double kUlp = 2.220446049250313e-16;  // 2^-52, the spacing of doubles in [1, 2)

// |got - want| in units of want's ulp (relative error / 2^-52, at least the relative error scale).
double ulps(double got, double want) {
  if (got == want) return 0.0;
  const double scale = std::fabs(want) > std::numeric_limits<double>::min() ? std::fabs(want) : 1e-300;
  return std::fabs(got - want) / (scale * kUlp);
}

template <typename Det, typename Ref, typename Gen>
double worst_ulps(Det det, Ref ref, Gen gen, int count, const char* name) {
  std::mt19937_64 rng(42);
  double worst = 0.0, worst_x = 0.0;
  for (int i = 0; i < count; ++i) {
    const double x = gen(rng);
    const double e = ulps(det(x), ref(x));
    if (e > worst) worst = e, worst_x = x;
  }
  std::printf("%-5s worst %.3f ulp at x = %.17g\n", name, worst, worst_x);
  return worst;
}

TEST(DetMath, ExpWithinTwoUlpOverTheWholeRange) {
  auto wide = [](std::mt19937_64& r) { return std::uniform_real_distribution<double>(-708.0, 709.0)(r); };
  auto narrow = [](std::mt19937_64& r) { return std::uniform_real_distribution<double>(-1.0, 1.0)(r); };
  auto tiny = [](std::mt19937_64& r) { return std::ldexp(std::uniform_real_distribution<double>(-1, 1)(r), -30); };
  const auto det = [](double x) { return det::exp(x); };
  const auto ref = [](double x) { return std::exp(x); };
  EXPECT_LE(worst_ulps(det, ref, wide, 200000, "exp"), 2.0);
  EXPECT_LE(worst_ulps(det, ref, narrow, 200000, "exp"), 2.0);
  EXPECT_LE(worst_ulps(det, ref, tiny, 10000, "exp"), 1.0);
}

TEST(DetMath, ExpEdges) {
  EXPECT_EQ(det::exp(0.0), 1.0);
  EXPECT_EQ(det::exp(710.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(det::exp(-746.0), 0.0);
  EXPECT_TRUE(std::isnan(det::exp(std::nan(""))));
  EXPECT_EQ(det::exp(-std::numeric_limits<double>::infinity()), 0.0);
  // Subnormal results: within a few units of the smallest denormal.
  for (double x : {-709.5, -720.0, -740.0, -745.0})
    EXPECT_NEAR(det::exp(x), std::exp(x), 4 * std::numeric_limits<double>::denorm_min()) << x;
  EXPECT_LE(ulps(det::exp(709.7), std::exp(709.7)), 2.0);
}

TEST(DetMath, BatchExpHasTheScalarBitsEverywhere) {
  // The AVX2 lanes must reproduce det::exp exactly, including the k = 0 / tiny / scalar-fallback
  // boundaries; values cover every branch and the four positions in a SIMD group.
  std::mt19937_64 rng(11);
  std::vector<double> x;
  for (double v : {0.0, -0.0, 1e-300, -3.7e-9, 3.8e-9, 0.34657359027997264, -0.34657359027997264, 0.3465735902799727,
                   1.0, -1.0, 707.9, -707.9, 708.0, -708.0, 708.1, -708.1, 709.7, -744.0, -746.0, 800.0})
    x.push_back(v);
  x.push_back(std::nan(""));
  x.push_back(std::numeric_limits<double>::infinity());
  x.push_back(-std::numeric_limits<double>::infinity());
  std::uniform_real_distribution<double> wide(-750.0, 720.0), softmax(-40.0, 0.0), small(-0.5, 0.5);
  for (int i = 0; i < 30000; ++i) x.push_back(i % 3 == 0 ? wide(rng) : i % 3 == 1 ? softmax(rng) : small(rng));
  for (const Isa tier : available_isas())  // every tier here against the scalar det::exp
  for (size_t offset = 0; offset < 4; ++offset) {
    std::vector<double> batch(x.begin() + static_cast<std::ptrdiff_t>(offset), x.end());
    det::exp_in_place(batch.data(), static_cast<std::int64_t>(batch.size()), tier);
    for (size_t i = 0; i < batch.size(); ++i) {
      const double want = det::exp(x[i + offset]);
      ASSERT_TRUE(std::memcmp(&batch[i], &want, sizeof want) == 0 || (std::isnan(want) && std::isnan(batch[i])))
          << isa_name(tier) << ": x = " << x[i + offset] << " batch " << batch[i] << " scalar " << want;
    }
  }
}

TEST(DetMath, LogWithinTwoUlp) {
  auto wide = [](std::mt19937_64& r) {
    return std::ldexp(std::uniform_real_distribution<double>(0.5, 1.0)(r),
                      std::uniform_int_distribution<int>(-1070, 1020)(r));
  };
  auto near_one = [](std::mt19937_64& r) { return 1.0 + std::uniform_real_distribution<double>(-0.3, 0.5)(r); };
  const auto det = [](double x) { return det::log(x); };
  const auto ref = [](double x) { return std::log(x); };
  EXPECT_LE(worst_ulps(det, ref, wide, 200000, "log"), 2.0);
  EXPECT_LE(worst_ulps(det, ref, near_one, 200000, "log"), 2.0);
  EXPECT_EQ(det::log(1.0), 0.0);
  EXPECT_EQ(det::log(0.0), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(det::log(-1.0)));
  EXPECT_EQ(det::log(std::numeric_limits<double>::infinity()), std::numeric_limits<double>::infinity());
}

TEST(DetMath, SinCosAbsoluteErrorBelowTwoUlpOfOne) {
  // Near multiples of pi the result is tiny and libm's own reduction differs from ours in the last
  // bits of the reduced argument, so the bound is absolute: 2 ulp of 1.
  for (const double range : {1.0, 10.0, 1000.0, 1048576.0}) {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> d(-range, range);
    double worst = 0.0;
    for (int i = 0; i < 200000; ++i) {
      const double x = d(rng);
      worst = std::max({worst, std::fabs(det::sin(x) - std::sin(x)), std::fabs(det::cos(x) - std::cos(x))});
    }
    std::printf("sin/cos on [-%g, %g]: worst absolute error %.3g (%.3f ulp of 1)\n", range, range, worst,
                worst / kUlp);
    EXPECT_LE(worst, 2 * kUlp) << range;
  }
  // Relative accuracy where the result is not small.
  const auto det = [](double x) { return det::sin(x); };
  const auto ref = [](double x) { return std::sin(x); };
  auto small = [](std::mt19937_64& r) { return std::uniform_real_distribution<double>(-0.78, 0.78)(r); };
  EXPECT_LE(worst_ulps(det, ref, small, 100000, "sin"), 1.5);
  EXPECT_EQ(det::sin(0.0), 0.0);
  EXPECT_EQ(det::cos(0.0), 1.0);
  EXPECT_THROW(det::sin(2e6), okapi::Error);
  EXPECT_TRUE(std::isnan(det::cos(std::nan(""))));
}

TEST(DetMath, TanhWithinFourUlp) {
  auto wide = [](std::mt19937_64& r) { return std::uniform_real_distribution<double>(-25.0, 25.0)(r); };
  auto small = [](std::mt19937_64& r) { return std::uniform_real_distribution<double>(-1.0, 1.0)(r); };
  auto tiny = [](std::mt19937_64& r) { return std::ldexp(std::uniform_real_distribution<double>(-1, 1)(r), -20); };
  const auto det = [](double x) { return det::tanh(x); };
  const auto ref = [](double x) { return std::tanh(x); };
  EXPECT_LE(worst_ulps(det, ref, wide, 200000, "tanh"), 4.0);
  EXPECT_LE(worst_ulps(det, ref, small, 200000, "tanh"), 4.0);
  EXPECT_LE(worst_ulps(det, ref, tiny, 10000, "tanh"), 4.0);
  EXPECT_EQ(det::tanh(30.0), 1.0);
  EXPECT_EQ(det::tanh(-30.0), -1.0);
}

TEST(DetMath, PowErrorGrowsOnlyWithTheExponentOfTheResult) {
  // pow = exp(e log b): the rounding of e log b (|e log b| ulp) is amplified by exp.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> base(0.01, 1e6), expo(-4.0, 4.0);
  double worst = 0.0;
  for (int i = 0; i < 100000; ++i) {
    const double b = base(rng), e = expo(rng);
    const double allowed = 2.0 + 2.0 * std::fabs(e * std::log(b));
    worst = std::max(worst, ulps(det::pow(b, e), std::pow(b, e)) / allowed);
  }
  std::printf("pow: worst error / (2 + 2 |e ln b|) ulp = %.3f\n", worst);
  EXPECT_LE(worst, 1.0);
  EXPECT_EQ(det::pow(10000.0, 0.0), 1.0);
  EXPECT_EQ(det::pow(1.0, 123.0), 1.0);
  EXPECT_TRUE(std::isnan(det::pow(-2.0, 0.5)));
}

TEST(DetMath, RsqrtIsTheCorrectlyRoundedDoubleQuotient) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(1e-6f, 1e6f);
  for (int i = 0; i < 10000; ++i) {
    const float x = d(rng);
    EXPECT_EQ(det::rsqrt(x), static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))));
  }
}

}  // namespace
}  // namespace okapi::exact
