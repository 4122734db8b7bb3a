// Dual-prime NTT: the same negacyclic product computed modulo two ~30-bit primes with only 64-bit
// arithmetic (Barrett31), joined by Garner's CRT into the signed range [-(q1q2-1)/2, (q1q2-1)/2].
// Exact whenever every true coefficient lies in that range (q1q2 ~ 2^59.99, so |c| < 2^58.99).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "exact/ntt.hpp"

namespace okapi::exact {

// Both primes are 1 mod 2^16, so 2N | q-1 for every N <= 32768; both below 2^30.
inline constexpr std::uint64_t kCrtPrime1 = 1073479681ULL;  // 16380 * 2^16 + 1
inline constexpr std::uint64_t kCrtPrime2 = 1072496641ULL;  // 16365 * 2^16 + 1

// Garner's CRT for two primes, uint64 only: x = r1 + q1 * ((r2 - r1) * q1^-1 mod q2) < q1 q2 < 2^60,
// then centred. r1 < q1, r2 < q2.
class Garner2 {
 public:
  Garner2(std::uint64_t q1, std::uint64_t q2);
  std::int64_t combine(std::uint64_t r1, std::uint64_t r2) const;
  std::uint64_t product() const { return q1_ * q2_; }
  // Largest |c| the signed result represents exactly: (q1 q2 - 1) / 2.
  std::int64_t max_magnitude() const { return static_cast<std::int64_t>((q1_ * q2_ - 1) / 2); }

 private:
  std::uint64_t q1_, q2_;
  Barrett31 mod2_;
  std::uint64_t q1_inverse_mod_q2_;
};

class DualPrimeNtt {
 public:
  explicit DualPrimeNtt(std::size_t n, std::uint64_t q1 = kCrtPrime1, std::uint64_t q2 = kCrtPrime2);

  std::size_t size() const { return ntt1_.size(); }
  const Ntt31& ring1() const { return ntt1_; }
  const Ntt31& ring2() const { return ntt2_; }
  const Garner2& garner() const { return garner_; }

  struct Transform {
    std::vector<std::uint64_t> mod1, mod2;
  };
  Transform forward(std::span<const std::int64_t> a) const;

  // Negacyclic product with signed coefficients (exact when |c_i| <= garner().max_magnitude()).
  std::vector<std::int64_t> multiply(std::span<const std::int64_t> a, std::span<const std::int64_t> b) const;
  // <q, k> from the two transforms of Q and K, O(N): see NegacyclicNtt::dot_from_transforms.
  std::int64_t dot_from_transforms(const Transform& q_hat, const Transform& k_hat) const;

 private:
  Ntt31 ntt1_, ntt2_;
  Garner2 garner_;
};

}  // namespace okapi::exact
