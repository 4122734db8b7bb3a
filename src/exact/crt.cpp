#include "exact/crt.hpp"

#include "core/error.hpp"

namespace okapi::exact {

Garner2::Garner2(std::uint64_t q1, std::uint64_t q2) : q1_(q1), q2_(q2), mod2_(q2) {
  if (q1 == q2 || q1 >= (std::uint64_t{1} << 31)) throw_error("Garner2: moduli {} and {} must be distinct and < 2^31", q1, q2);
  q1_inverse_mod_q2_ = inverse_mod(mod2_, q1 % q2);
  if (mod2_.mul(q1 % q2, q1_inverse_mod_q2_) != 1) throw_error("Garner2: {} has no inverse mod {}", q1, q2);
}

std::int64_t Garner2::combine(std::uint64_t r1, std::uint64_t r2) const {
  const std::uint64_t h = mod2_.mul(mod2_.sub(r2, r1 % q2_), q1_inverse_mod_q2_);
  const std::uint64_t x = r1 + q1_ * h;  // < q1 + q1 (q2 - 1) = q1 q2
  const std::uint64_t m = q1_ * q2_;
  return x > (m - 1) / 2 ? -static_cast<std::int64_t>(m - x) : static_cast<std::int64_t>(x);
}

DualPrimeNtt::DualPrimeNtt(std::size_t n, std::uint64_t q1, std::uint64_t q2)
    : ntt1_(q1, n), ntt2_(q2, n), garner_(q1, q2) {}

DualPrimeNtt::Transform DualPrimeNtt::forward(std::span<const std::int64_t> a) const {
  Transform t{ntt1_.to_residues(a), ntt2_.to_residues(a)};
  ntt1_.forward(t.mod1);
  ntt2_.forward(t.mod2);
  return t;
}

std::vector<std::int64_t> DualPrimeNtt::multiply(std::span<const std::int64_t> a, std::span<const std::int64_t> b) const {
  const std::vector<std::uint64_t> c1 = ntt1_.multiply(ntt1_.to_residues(a), ntt1_.to_residues(b));
  const std::vector<std::uint64_t> c2 = ntt2_.multiply(ntt2_.to_residues(a), ntt2_.to_residues(b));
  std::vector<std::int64_t> out(c1.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = garner_.combine(c1[i], c2[i]);
  return out;
}

std::int64_t DualPrimeNtt::dot_from_transforms(const Transform& q_hat, const Transform& k_hat) const {
  return garner_.combine(ntt1_.dot_from_transforms(q_hat.mod1, k_hat.mod1),
                         ntt2_.dot_from_transforms(q_hat.mod2, k_hat.mod2));
}

}  // namespace okapi::exact
