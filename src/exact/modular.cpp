#include "exact/modular.hpp"

#include <bit>

#include "core/error.hpp"

namespace okapi::exact {

namespace {

std::uint64_t mul_mod_u128(std::uint64_t a, std::uint64_t b, std::uint64_t n) {
  return static_cast<std::uint64_t>(static_cast<UInt128>(a) * b % n);
}

std::uint64_t pow_mod_u128(std::uint64_t base, std::uint64_t exponent, std::uint64_t n) {
  std::uint64_t result = 1 % n;
  base %= n;
  while (exponent > 0) {
    if (exponent & 1) result = mul_mod_u128(result, base, n);
    base = mul_mod_u128(base, base, n);
    exponent >>= 1;
  }
  return result;
}

}  // namespace

bool is_prime_u64(std::uint64_t n) {
  constexpr std::uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (std::uint64_t p : kBases) {
    if (n % p == 0) return n == p;
  }
  const int s = std::countr_zero(n - 1);
  const std::uint64_t d = (n - 1) >> s;
  for (std::uint64_t a : kBases) {
    std::uint64_t x = pow_mod_u128(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s && composite; ++r) {
      x = mul_mod_u128(x, x, n);
      if (x == n - 1) composite = false;
    }
    if (composite) return false;
  }
  return true;
}

int two_adic_valuation(std::uint64_t n) {
  if (n == 0) throw_error("two_adic_valuation: n must be nonzero");
  return std::countr_zero(n);
}

Barrett60::Barrett60(std::uint64_t q) : q_(q) {
  if (q < 3 || q % 2 == 0 || q >= (std::uint64_t{1} << 62)) {
    throw_error("Barrett60: modulus {} must be odd and in [3, 2^62)", q);
  }
  k_ = static_cast<int>(std::bit_width(q));
  mu_ = (static_cast<UInt128>(1) << (2 * k_)) / q;
}

std::uint64_t Barrett60::reduce(UInt128 x) const {
  const UInt128 estimate = ((x >> (k_ - 1)) * mu_) >> (k_ + 1);
  // x - estimate*q < 3q < 2^64, so the low 64 bits carry the whole remainder.
  std::uint64_t r = static_cast<std::uint64_t>(x) - static_cast<std::uint64_t>(estimate) * q_;
  if (r >= q_) r -= q_;
  if (r >= q_) r -= q_;
  return r;
}

Barrett31::Barrett31(std::uint64_t q) : q_(q) {
  if (q < 3 || q % 2 == 0 || q >= (std::uint64_t{1} << 31)) {
    throw_error("Barrett31: modulus {} must be odd and in [3, 2^31)", q);
  }
  k_ = static_cast<int>(std::bit_width(q));
  mu_ = (std::uint64_t{1} << (2 * k_)) / q;
}

std::uint64_t Barrett31::reduce(std::uint64_t x) const {
  const std::uint64_t estimate = ((x >> (k_ - 1)) * mu_) >> (k_ + 1);
  std::uint64_t r = x - estimate * q_;
  if (r >= q_) r -= q_;
  if (r >= q_) r -= q_;
  return r;
}

}  // namespace okapi::exact
