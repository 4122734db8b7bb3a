// Modular arithmetic, negacyclic NTT over the 60-bit prime and the dual-prime CRT path, and the
// seed-000 claims about them (q, psi = 1753, Barrett constant, which coefficient holds <q, k>).
#include <gtest/gtest.h>

#include <random>

#include "core/error.hpp"
#include "exact/crt.hpp"
#include "exact/matvec.hpp"
#include "exact/ntt.hpp"

namespace okapi::exact {
namespace {

std::vector<std::int64_t> random_vector(std::mt19937_64& rng, std::size_t n, std::int64_t bound) {
  std::uniform_int_distribution<std::int64_t> d(-bound, bound);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(ModularTest, PrimalityAndTwoAdicOrder) {
  EXPECT_TRUE(is_prime_u64(kNttPrime60));
  EXPECT_EQ(two_adic_valuation(kNttPrime60 - 1), 16);
  EXPECT_EQ((kNttPrime60 - 1) >> 16, 8796093022345ULL);  // q = k 2^16 + 1 with k > 2^16: not a Proth number
  EXPECT_TRUE(is_prime_u64(kCrtPrime1));
  EXPECT_TRUE(is_prime_u64(kCrtPrime2));
  EXPECT_GE(two_adic_valuation(kCrtPrime1 - 1), 16);
  EXPECT_GE(two_adic_valuation(kCrtPrime2 - 1), 16);
  EXPECT_LT(kCrtPrime1, 1ULL << 30);
  EXPECT_LT(kCrtPrime2, 1ULL << 30);
  // Strong pseudoprimes and edge cases.
  EXPECT_FALSE(is_prime_u64(3215031751ULL));          // spsp to bases 2, 3, 5, 7
  EXPECT_FALSE(is_prime_u64(3825123056546413051ULL));  // spsp to bases 2..23
  EXPECT_FALSE(is_prime_u64(1));
  EXPECT_TRUE(is_prime_u64(2));
  EXPECT_TRUE(is_prime_u64(18446744073709551557ULL));  // largest 64-bit prime
  EXPECT_FALSE(is_prime_u64(kNttPrime60 + 2));
}

TEST(ModularTest, BarrettMatchesDivision) {
  std::mt19937_64 rng(11);
  const Barrett60 m60(kNttPrime60);
  const Barrett31 m31(kCrtPrime1);
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t a = rng() % kNttPrime60, b = rng() % kNttPrime60;
    ASSERT_EQ(m60.mul(a, b), static_cast<std::uint64_t>(static_cast<UInt128>(a) * b % kNttPrime60));
    const std::uint64_t c = rng() % kCrtPrime1, d = rng() % kCrtPrime1;
    ASSERT_EQ(m31.mul(c, d), c * d % kCrtPrime1);
  }
  EXPECT_EQ(m60.mul(kNttPrime60 - 1, kNttPrime60 - 1), 1u);
  EXPECT_EQ(m31.mul(kCrtPrime1 - 1, kCrtPrime1 - 1), 1u);
}

// Seed 000's Barrett: mu = floor(2^120 / q) but the quotient estimate uses (ab >> 64) * mu >> 64,
// i.e. ab / (q 2^8): the estimate is ~256x too small and one conditional subtraction cannot fix it.
TEST(ModularTest, SeedBarrettFormulaIsWrong) {
  const UInt128 mu = (static_cast<UInt128>(1) << 120) / kNttPrime60;
  const std::uint64_t q = kNttPrime60;
  const auto seed_mulmod = [&](std::uint64_t a, std::uint64_t b) {
    const UInt128 ab = static_cast<UInt128>(a) * b;
    const auto q_hi = static_cast<std::uint64_t>(ab >> 64);
    const auto t = static_cast<std::uint64_t>((static_cast<UInt128>(q_hi) * mu) >> 64);
    std::uint64_t r = static_cast<std::uint64_t>(ab) - t * q;
    return r >= q ? r - q : r;
  };
  EXPECT_NE(seed_mulmod(q - 1, q - 1), 1u);
  std::mt19937_64 rng(12);
  int wrong = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t a = rng() % q, b = rng() % q;
    wrong += seed_mulmod(a, b) != static_cast<std::uint64_t>(static_cast<UInt128>(a) * b % q);
  }
  EXPECT_GT(wrong, 990);
}

TEST(ModularTest, Seed1753IsAGeneratorNotA512thRoot) {
  const Barrett60 m(kNttPrime60);
  // 1753 is a quadratic non-residue (Euler: 1753^((q-1)/2) = -1) ...
  EXPECT_EQ(pow_mod(m, 1753, (kNttPrime60 - 1) / 2), kNttPrime60 - 1);
  // ... so it is not a 512-th root of unity (order 512 would make it a square):
  EXPECT_NE(pow_mod(m, 1753, 512), 1u);
  EXPECT_NE(pow_mod(m, 1753, 256), kNttPrime60 - 1);
  // In fact it generates the whole group: 1753^((q-1)/p) != 1 for each prime p | q-1.
  for (std::uint64_t p : {2ULL, 5ULL, 4483ULL, 5711ULL, 68713ULL}) {
    EXPECT_NE(pow_mod(m, 1753, (kNttPrime60 - 1) / p), 1u) << p;
  }
  EXPECT_EQ((kNttPrime60 - 1), 65536ULL * 5 * 4483 * 5711 * 68713);
  // The root is derived from it: psi = 1753^((q-1)/512) has order exactly 512.
  const std::uint64_t psi = pow_mod(m, 1753, (kNttPrime60 - 1) / 512);
  EXPECT_EQ(pow_mod(m, psi, 256), kNttPrime60 - 1);
  EXPECT_EQ(power_of_two_order(m, psi, 16), 512u);
}

template <typename Ntt>
void check_roots(const Ntt& ntt) {
  const std::uint64_t q = ntt.modulus();
  const std::size_t n = ntt.size();
  EXPECT_EQ(pow_mod(ntt.arithmetic(), ntt.psi(), n), q - 1);
  EXPECT_EQ(power_of_two_order(ntt.arithmetic(), ntt.psi(), 20), 2 * n);
  EXPECT_EQ(pow_mod(ntt.arithmetic(), ntt.non_residue(), (q - 1) / 2), q - 1);
}

TEST(NttTest, RootsRoundTripAndSchoolbook) {
  std::mt19937_64 rng(13);
  for (std::size_t n = 64; n <= 4096; n *= 2) {
    const Ntt60 ntt(kNttPrime60, n);
    const DualPrimeNtt crt(n);
    check_roots(ntt);
    check_roots(crt.ring1());
    check_roots(crt.ring2());
    // Round trip, with a value at each end of the residue range.
    std::vector<std::uint64_t> a(n);
    for (auto& v : a) v = rng() % kNttPrime60;
    a[0] = 0;
    a[1] = kNttPrime60 - 1;
    std::vector<std::uint64_t> t = a;
    ntt.forward(t);
    ntt.inverse(t);
    ASSERT_EQ(t, a) << n;
    // Products: schoolbook is O(N^2), so compare in full up to 1024 and spot-check larger sizes
    // through the CRT path (different primes, same integers).
    const std::int64_t bound = n <= 1024 ? (1 << 20) : (1 << 12);
    const std::vector<std::int64_t> x = random_vector(rng, n, bound), y = random_vector(rng, n, bound);
    const std::vector<std::int64_t> via_crt = crt.multiply(x, y);
    std::vector<std::int64_t> via_60(n);
    const std::vector<std::uint64_t> c = ntt.multiply(ntt.to_residues(x), ntt.to_residues(y));
    for (std::size_t i = 0; i < n; ++i) via_60[i] = ntt.from_residue(c[i]);
    ASSERT_EQ(via_crt, via_60) << n;  // bit-identical: all |c_i| <= n 2^40 < (q-1)/2
    if (n <= 1024) {
      ASSERT_EQ(via_60, negacyclic_schoolbook(x, y)) << n;
    }
  }
  EXPECT_THROW(Ntt60(kNttPrime60, 1u << 16), Error);  // 2N = 2^17 does not divide q-1
  EXPECT_THROW(Ntt60(kNttPrime60, 100), Error);
  EXPECT_THROW(Ntt31(kCrtPrime1 + 2, 64), Error);
}

TEST(NttTest, BoundaryInputsAndCrtRange) {
  const std::size_t n = 64;
  const DualPrimeNtt crt(n);
  const Ntt60 ntt(kNttPrime60, n);
  // Largest inputs the 60-bit path allows: n A^2 <= (q-1)/2 with A = 2^26 (64 * 2^52 = 2^58).
  const std::int64_t a = 1LL << 26;
  std::vector<std::int64_t> x(n, a), y(n, a), z(n, -a);
  EXPECT_EQ(pick_ntt_accumulator(a, a, n), Accumulator::ntt60);
  const std::vector<std::int64_t> expected = negacyclic_schoolbook(x, y);
  EXPECT_EQ(crt.multiply(x, y), expected);
  EXPECT_EQ(crt.multiply(x, z), negacyclic_schoolbook(x, z));
  const std::vector<std::uint64_t> c = ntt.multiply(ntt.to_residues(x), ntt.to_residues(y));
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(ntt.from_residue(c[i]), expected[i]);
  // Garner centres into [-(q1q2-1)/2, (q1q2-1)/2].
  const Garner2& g = crt.garner();
  const std::int64_t m = g.max_magnitude();
  EXPECT_EQ(g.combine(static_cast<std::uint64_t>(m) % kCrtPrime1, static_cast<std::uint64_t>(m) % kCrtPrime2), m);
  const auto neg = [](std::int64_t v, std::uint64_t q) { return (q - (static_cast<std::uint64_t>(-v) % q)) % q; };
  EXPECT_EQ(g.combine(neg(-m, kCrtPrime1), neg(-m, kCrtPrime2)), -m);
  EXPECT_EQ(g.combine(0, 0), 0);
}

TEST(NttTest, InnerProductIsCoefficientZeroOfQTimesKReversed) {
  std::mt19937_64 rng(14);
  for (std::size_t n : {64u, 256u, 1024u}) {
    const Ntt60 ntt(kNttPrime60, n);
    const DualPrimeNtt crt(n);
    const std::vector<std::int64_t> q = random_vector(rng, n, 1 << 15), k = random_vector(rng, n, 1 << 15);
    std::int64_t dot = 0;
    for (std::size_t i = 0; i < n; ++i) dot += q[i] * k[i];
    const std::vector<std::int64_t> product = negacyclic_schoolbook(q, negacyclic_reverse(k));
    EXPECT_EQ(product[0], dot);
    // Seed 000 reads coefficient N-1; that is q_(N-1) k_0 - sum_j q_j k_(j+1), not <q, k>.
    std::int64_t seed_coeff = q[n - 1] * k[0];
    for (std::size_t j = 0; j + 1 < n; ++j) seed_coeff -= q[j] * k[j + 1];
    EXPECT_EQ(product[n - 1], seed_coeff);
    EXPECT_NE(product[n - 1], dot);
    // Through the transforms (K stored transformed once, no inverse transform per key).
    std::vector<std::uint64_t> q_hat = ntt.to_residues(q), k_hat = ntt.to_residues(k);
    ntt.forward(q_hat);
    ntt.forward(k_hat);
    EXPECT_EQ(ntt.from_residue(ntt.dot_from_transforms(q_hat, k_hat)), dot);
    EXPECT_EQ(crt.dot_from_transforms(crt.forward(q), crt.forward(k)), dot);
  }
}

TEST(NttTest, CoefficientExtractionEqualsInverseTransform) {
  std::mt19937_64 rng(15);
  const std::size_t n = 256;
  const Ntt60 ntt(kNttPrime60, n);
  const Ntt31 ntt31(kCrtPrime2, n);
  const std::vector<std::int64_t> a = random_vector(rng, n, 1 << 20), b = random_vector(rng, n, 1 << 20);
  std::vector<std::uint64_t> a_hat = ntt.to_residues(a), b_hat = ntt.to_residues(b);
  // Forward output j is the evaluation at psi^(2j+1) (checked directly for a few j).
  const std::vector<std::uint64_t> a_res = a_hat;
  ntt.forward(a_hat);
  ntt.forward(b_hat);
  const Barrett60& m = ntt.arithmetic();
  for (std::size_t j : {0u, 1u, 77u, 255u}) {
    const std::uint64_t root = pow_mod(m, ntt.psi(), 2 * j + 1);
    std::uint64_t value = 0;
    for (std::size_t i = n; i-- > 0;) value = m.add(m.mul(value, root), a_res[i]);
    ASSERT_EQ(a_hat[j], value) << j;
  }
  const std::vector<std::uint64_t> c = ntt.multiply(ntt.to_residues(a), ntt.to_residues(b));
  for (std::size_t idx = 0; idx < n; ++idx) ASSERT_EQ(ntt.coefficient_from_transforms(a_hat, b_hat, idx), c[idx]) << idx;
  std::vector<std::uint64_t> a31 = ntt31.to_residues(a), b31 = ntt31.to_residues(b);
  const std::vector<std::uint64_t> c31 = ntt31.multiply(a31, b31);
  ntt31.forward(a31);
  ntt31.forward(b31);
  for (std::size_t idx : {0u, 1u, 128u, 255u}) ASSERT_EQ(ntt31.coefficient_from_transforms(a31, b31, idx), c31[idx]);
  EXPECT_THROW(ntt.coefficient_from_transforms(a_hat, b_hat, n), Error);
}

}  // namespace
}  // namespace okapi::exact
