// Modular arithmetic for the exact (integer) paths: primality, Barrett reduction, roots of unity.
// Two moduli types share one interface (mul/add/sub/pow on residues in [0, q)) so the NTT is
// written once: Barrett60 (q < 2^62, products in UInt128) and Barrett31 (q < 2^31,
// every intermediate in uint64 — the portable path for hardware without 128-bit integers).
#pragma once
#include <cstdint>

#include "exact/int128.hpp"

namespace okapi::exact {

// Deterministic Miller-Rabin: the first 12 primes as bases decide every n < 2^64.
bool is_prime_u64(std::uint64_t n);

// Largest e with 2^e | n (n > 0).
int two_adic_valuation(std::uint64_t n);

// Barrett reduction with 128-bit products. k = bit width of q, mu = floor(2^(2k) / q);
// the quotient estimate ((x >> (k-1)) * mu) >> (k+1) is at most 2 below the true one (HAC 14.42).
class Barrett60 {
 public:
  explicit Barrett60(std::uint64_t q);  // q odd, 3 <= q < 2^62
  std::uint64_t modulus() const { return q_; }
  std::uint64_t reduce(UInt128 x) const;  // x < q^2
  std::uint64_t mul(std::uint64_t a, std::uint64_t b) const { return reduce(static_cast<UInt128>(a) * b); }
  std::uint64_t add(std::uint64_t a, std::uint64_t b) const { const std::uint64_t s = a + b; return s >= q_ ? s - q_ : s; }
  std::uint64_t sub(std::uint64_t a, std::uint64_t b) const { return a >= b ? a - b : a + (q_ - b); }

 private:
  std::uint64_t q_;
  int k_;
  UInt128 mu_;
};

// Same algorithm with q < 2^31: x < q^2 < 2^62, (x >> (k-1)) < 2^(k+1) and mu <= 2^(k+1), so the
// quotient product stays below 2^64. No 128-bit type anywhere.
class Barrett31 {
 public:
  explicit Barrett31(std::uint64_t q);  // q odd, 3 <= q < 2^31
  std::uint64_t modulus() const { return q_; }
  std::uint64_t reduce(std::uint64_t x) const;  // x < q^2
  std::uint64_t mul(std::uint64_t a, std::uint64_t b) const { return reduce(a * b); }
  std::uint64_t add(std::uint64_t a, std::uint64_t b) const { const std::uint64_t s = a + b; return s >= q_ ? s - q_ : s; }
  std::uint64_t sub(std::uint64_t a, std::uint64_t b) const { return a >= b ? a - b : a + (q_ - b); }

 private:
  std::uint64_t q_;
  int k_;
  std::uint64_t mu_;
};

template <typename Mod>
std::uint64_t pow_mod(const Mod& m, std::uint64_t base, std::uint64_t exponent) {
  std::uint64_t result = 1 % m.modulus();
  base %= m.modulus();
  while (exponent > 0) {
    if (exponent & 1) result = m.mul(result, base);
    base = m.mul(base, base);
    exponent >>= 1;
  }
  return result;
}

// Inverse of a (nonzero mod prime q) by Fermat: a^(q-2).
template <typename Mod>
std::uint64_t inverse_mod(const Mod& m, std::uint64_t a) {
  return pow_mod(m, a, m.modulus() - 2);
}

// Smallest quadratic non-residue mod the prime q (Euler's criterion: z^((q-1)/2) = q-1).
template <typename Mod>
std::uint64_t smallest_non_residue(const Mod& m) {
  for (std::uint64_t z = 2;; ++z) {
    if (pow_mod(m, z, (m.modulus() - 1) / 2) == m.modulus() - 1) return z;
  }
}

// Order of a modulo q, given that it divides 2^e: the smallest 2^j with a^(2^j) = 1; 0 if none.
template <typename Mod>
std::uint64_t power_of_two_order(const Mod& m, std::uint64_t a, int max_log2) {
  std::uint64_t x = a % m.modulus();
  for (int j = 0; j <= max_log2; ++j) {
    if (x == 1) return std::uint64_t{1} << j;
    x = m.mul(x, x);
  }
  return 0;
}

}  // namespace okapi::exact
