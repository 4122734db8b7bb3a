// Negacyclic number-theoretic transform over Z_q[x]/(x^N + 1), N = 2^n.
//
// psi is a primitive 2N-th root of unity mod q (psi^N = -1). The forward transform evaluates
// A at the N roots of x^N + 1, in natural order:  Ahat_j = A(psi^(2j+1)) = sum_i a_i psi^i w^(ij)
// with w = psi^2, i.e. twist by psi^i and then a cyclic NTT. Products in the ring are pointwise.
//
// psi is derived, not hard-coded: for any quadratic non-residue z, psi = z^((q-1)/2N) has
// psi^N = z^((q-1)/2) = -1, so its order is exactly 2N. The constructor checks psi^N = -1.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "exact/modular.hpp"

namespace okapi::exact {

// The 60-bit prime of seed 000: q = 8796093022345 * 2^16 + 1, prime, v2(q-1) = 16.
inline constexpr std::uint64_t kNttPrime60 = 576460752312401921ULL;

template <typename Mod>
class NegacyclicNtt {
 public:
  // n: power of two >= 2 with 2n | q-1; q prime. Throws okapi::Error otherwise.
  NegacyclicNtt(std::uint64_t q, std::size_t n);

  std::size_t size() const { return n_; }
  std::uint64_t modulus() const { return mod_.modulus(); }
  const Mod& arithmetic() const { return mod_; }
  std::uint64_t psi() const { return psi_powers_[1]; }
  std::uint64_t non_residue() const { return non_residue_; }

  void forward(std::span<std::uint64_t> a) const;  // residues in [0, q), in place
  void inverse(std::span<std::uint64_t> a) const;

  // Residues <-> signed integers; from_residue picks the representative in [-(q-1)/2, (q-1)/2].
  std::vector<std::uint64_t> to_residues(std::span<const std::int64_t> values) const;
  std::int64_t from_residue(std::uint64_t r) const;

  // c = a * b in Z_q[x]/(x^N + 1), through the transform.
  std::vector<std::uint64_t> multiply(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b) const;

  // Coefficient m of A*B straight from the transforms, O(N) and no inverse transform:
  //   c_m = (1/N) sum_j Ahat_j Bhat_j psi^(-(2j+1) m).
  std::uint64_t coefficient_from_transforms(std::span<const std::uint64_t> a_hat,
                                            std::span<const std::uint64_t> b_hat, std::size_t m) const;

  // <q, k> mod q from the transforms of Q and K (not of K(x^-1)): K(x^-1) at psi^(2j+1) is K at
  // psi^(-(2j+1)) = psi^(2(N-1-j)+1), so <q, k> = coeff_0(Q(x) K(x^-1)) = (1/N) sum_j Qhat_j Khat_(N-1-j).
  std::uint64_t dot_from_transforms(std::span<const std::uint64_t> q_hat, std::span<const std::uint64_t> k_hat) const;

 private:
  void cyclic_transform(std::span<std::uint64_t> a, const std::vector<std::uint64_t>& root_powers) const;
  void check_size(std::span<const std::uint64_t> a, const char* what) const;

  Mod mod_;
  std::size_t n_;
  std::uint64_t non_residue_ = 0;
  std::uint64_t n_inverse_ = 0;
  std::vector<std::uint64_t> psi_powers_;      // psi^i, i < N
  std::vector<std::uint64_t> psi_inv_powers_;  // psi^-i, i < N
  std::vector<std::uint64_t> w_powers_;        // (psi^2)^j, j < N/2
  std::vector<std::uint64_t> w_inv_powers_;
};

extern template class NegacyclicNtt<Barrett60>;
extern template class NegacyclicNtt<Barrett31>;

using Ntt60 = NegacyclicNtt<Barrett60>;
using Ntt31 = NegacyclicNtt<Barrett31>;

// Reference O(N^2) product in Z[x]/(x^N + 1) over the integers (exact, __int128 sums; throws if a
// coefficient leaves int64).
std::vector<std::int64_t> negacyclic_schoolbook(std::span<const std::int64_t> a, std::span<const std::int64_t> b);

// Coefficients of K(x^-1) in Z[x]/(x^N + 1): x^-i = -x^(N-i), so it is [k0, -k_(N-1), ..., -k_1].
std::vector<std::int64_t> negacyclic_reverse(std::span<const std::int64_t> k);

}  // namespace okapi::exact
