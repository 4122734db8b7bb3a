// Z[w], w^2 = w - 41: arithmetic identities, norms, exact division, splitting of 41, inertness of 2.
#include <gtest/gtest.h>

#include <random>

#include "core/error.hpp"
#include "exact/ring.hpp"

namespace okapi::exact {
namespace {

ZOmega random_element(std::mt19937_64& rng, std::int64_t bound) {
  std::uniform_int_distribution<std::int64_t> d(-bound, bound);
  return {d(rng), d(rng)};
}

TEST(ZOmegaTest, OmegaSquaredIsOmegaMinus41) {
  const ZOmega w{0, 1};
  EXPECT_EQ(mul(w, w), (ZOmega{-41, 1}));
  EXPECT_EQ(conjugate(w), (ZOmega{1, -1}));          // conj(w) = 1 - w
  EXPECT_EQ(add(w, conjugate(w)), (ZOmega{1, 0}));  // trace 1
  EXPECT_EQ(mul(w, conjugate(w)), (ZOmega{41, 0}));  // 41 = w conj(w)
}

// (a + bw)(c + dw) expanded by hand with w^2 = w - 41 must equal mul().
TEST(ZOmegaTest, ProductFormulaMatchesExpansion) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    const ZOmega x = random_element(rng, 1 << 20), y = random_element(rng, 1 << 20);
    // ac + (ad + bc) w + bd w^2, with w^2 = (-41, 1)
    const ZOmega expanded = add(add({x.a * y.a, 0}, {0, x.a * y.b + x.b * y.a}), mul({x.b * y.b, 0}, {-41, 1}));
    ASSERT_EQ(mul(x, y), expanded);
    ASSERT_EQ(mul(x, y), (ZOmega{x.a * y.a - 41 * x.b * y.b, x.a * y.b + x.b * y.a + x.b * y.b}));
    ASSERT_EQ(mul(x, y), mul(y, x));
    const ZOmega z = random_element(rng, 1 << 10);
    ASSERT_EQ(mul(x, add(y, z)), add(mul(x, y), mul(x, z)));
    ASSERT_EQ(sub(add(x, y), y), x);
  }
}

TEST(ZOmegaTest, NormIsMultiplicativeAndMatchesFormula) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 1000; ++i) {
    const ZOmega x = random_element(rng, 1 << 15), y = random_element(rng, 1 << 15);
    ASSERT_EQ(norm(x), static_cast<Int128>(x.a) * x.a + static_cast<Int128>(x.a) * x.b + 41 * static_cast<Int128>(x.b) * x.b);
    ASSERT_EQ(norm(mul(x, y)), norm(x) * norm(y));
    ASSERT_EQ(norm(conjugate(x)), norm(x));
    ASSERT_EQ(mul(x, conjugate(x)), (ZOmega{static_cast<std::int64_t>(norm(x)), 0}));
  }
}

TEST(ZOmegaTest, FortyOneSplitsTwoIsInert) {
  EXPECT_EQ(norm({0, 1}), 41);
  EXPECT_EQ(norm({1, -1}), 41);
  // w and conj(w) are not associates (units are +-1), so 41 splits into two distinct primes.
  EXPECT_FALSE(divides({0, 1}, {1, -1}));
  // No element of norm 2: N = (a + b/2)^2 + 163 b^2 / 4 >= 40.75 when b != 0, and a^2 != 2.
  for (std::int64_t b = -3; b <= 3; ++b) {
    for (std::int64_t a = -200; a <= 200; ++a) ASSERT_NE(norm({a, b}), 2) << a << " " << b;
  }
  // 2 is prime in Z[w]: it divides a product only if it divides a factor (checked on a grid).
  for (std::int64_t a = -6; a <= 6; ++a) {
    for (std::int64_t b = -6; b <= 6; ++b) {
      for (std::int64_t c = -6; c <= 6; ++c) {
        for (std::int64_t d = -6; d <= 6; ++d) {
          if (divides({2, 0}, mul({a, b}, {c, d}))) {
            ASSERT_TRUE(divides({2, 0}, {a, b}) || divides({2, 0}, {c, d}));
          }
        }
      }
    }
  }
}

TEST(ZOmegaTest, ExactDivisionAndPowers) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    const ZOmega x = random_element(rng, 1 << 20), d = random_element(rng, 1 << 10);
    if (d == ZOmega{}) continue;
    ASSERT_EQ(divide_exact(mul(x, d), d), x);
  }
  EXPECT_EQ(power({0, 1}, 0), (ZOmega{1, 0}));
  ZOmega acc{1, 0};
  for (unsigned k = 1; k <= 11; ++k) {
    acc = mul(acc, {0, 1});
    ASSERT_EQ(power({0, 1}, k), acc);
    Int128 n41 = 1;
    for (unsigned j = 0; j < k; ++j) n41 *= 41;
    ASSERT_EQ(norm(acc), n41);
  }
  // Seed 000: "N(pi_41^8) = 41^8 ~ 2.8e12" — it is 7984925229121 ~ 8.0e12 (2.8e6 is 41^4).
  EXPECT_EQ(norm(power({0, 1}, 8)), 7984925229121);
  EXPECT_EQ(norm(power({0, 1}, 4)), 2825761);
}

TEST(ZOmegaTest, ClearErrors) {
  EXPECT_THROW(divide_exact({1, 0}, {0, 1}), Error);  // 41 does not divide 1
  EXPECT_THROW(divide_exact({1, 0}, {0, 0}), Error);
  EXPECT_THROW(divide_exact({41, 0}, {2, 0}), Error);
  EXPECT_THROW(mul({INT64_MAX, 0}, {2, 0}), Error);
  EXPECT_THROW(add({INT64_MAX, 0}, {1, 0}), Error);
  EXPECT_THROW(power({0, 1}, 30), Error);  // 41^15-ish parts leave int64
  try {
    divide_exact({5, 3}, {0, 1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace okapi::exact
