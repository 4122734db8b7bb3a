#include "exact/ntt.hpp"

#include <bit>
#include <utility>

#include "core/error.hpp"

namespace okapi::exact {

namespace {

std::size_t reverse_bits(std::size_t i, int bits) {
  std::size_t r = 0;
  for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1u) << (bits - 1 - b);
  return r;
}

}  // namespace

template <typename Mod>
NegacyclicNtt<Mod>::NegacyclicNtt(std::uint64_t q, std::size_t n) : mod_(q), n_(n) {
  if (n < 2 || !std::has_single_bit(n)) throw_error("NTT: size {} is not a power of two >= 2", n);
  if (!is_prime_u64(q)) throw_error("NTT: modulus {} is not prime", q);
  if ((q - 1) % (2 * n) != 0) {
    throw_error("NTT: 2N = {} does not divide q-1 = {} (2-adic order of q-1 is {})", 2 * n, q - 1,
                two_adic_valuation(q - 1));
  }
  non_residue_ = smallest_non_residue(mod_);
  const std::uint64_t psi = pow_mod(mod_, non_residue_, (q - 1) / (2 * n));
  if (pow_mod(mod_, psi, n) != q - 1) throw_error("NTT: psi = {} has psi^N != -1 mod {}", psi, q);
  const std::uint64_t psi_inv = inverse_mod(mod_, psi);
  psi_powers_.resize(n);
  psi_inv_powers_.resize(n);
  psi_powers_[0] = psi_inv_powers_[0] = 1;
  for (std::size_t i = 1; i < n; ++i) {
    psi_powers_[i] = mod_.mul(psi_powers_[i - 1], psi);
    psi_inv_powers_[i] = mod_.mul(psi_inv_powers_[i - 1], psi_inv);
  }
  w_powers_.resize(n / 2);
  w_inv_powers_.resize(n / 2);
  for (std::size_t j = 0; j < n / 2; ++j) {
    w_powers_[j] = psi_powers_[2 * j];
    w_inv_powers_[j] = psi_inv_powers_[2 * j];
  }
  n_inverse_ = inverse_mod(mod_, static_cast<std::uint64_t>(n) % q);
}

template <typename Mod>
void NegacyclicNtt<Mod>::check_size(std::span<const std::uint64_t> a, const char* what) const {
  if (a.size() != n_) throw_error("NTT {}: length {} != N = {}", what, a.size(), n_);
}

// Iterative radix-2 Cooley-Tukey on bit-reversed input; natural-order output.
template <typename Mod>
void NegacyclicNtt<Mod>::cyclic_transform(std::span<std::uint64_t> a,
                                          const std::vector<std::uint64_t>& root_powers) const {
  const int log_n = std::countr_zero(n_);
  for (std::size_t i = 0; i < n_; ++i) {
    const std::size_t j = reverse_bits(i, log_n);
    if (i < j) std::swap(a[i], a[j]);
  }
  for (std::size_t half = 1; half < n_; half *= 2) {
    const std::size_t stride = n_ / (2 * half);
    for (std::size_t start = 0; start < n_; start += 2 * half) {
      for (std::size_t j = 0; j < half; ++j) {
        const std::uint64_t u = a[start + j];
        const std::uint64_t v = mod_.mul(a[start + j + half], root_powers[j * stride]);
        a[start + j] = mod_.add(u, v);
        a[start + j + half] = mod_.sub(u, v);
      }
    }
  }
}

template <typename Mod>
void NegacyclicNtt<Mod>::forward(std::span<std::uint64_t> a) const {
  check_size(a, "forward");
  for (std::size_t i = 0; i < n_; ++i) a[i] = mod_.mul(a[i], psi_powers_[i]);
  cyclic_transform(a, w_powers_);
}

template <typename Mod>
void NegacyclicNtt<Mod>::inverse(std::span<std::uint64_t> a) const {
  check_size(a, "inverse");
  cyclic_transform(a, w_inv_powers_);
  for (std::size_t i = 0; i < n_; ++i) a[i] = mod_.mul(mod_.mul(a[i], n_inverse_), psi_inv_powers_[i]);
}

template <typename Mod>
std::vector<std::uint64_t> NegacyclicNtt<Mod>::to_residues(std::span<const std::int64_t> values) const {
  const auto q = static_cast<std::int64_t>(modulus());  // q < 2^62 fits
  std::vector<std::uint64_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::int64_t r = values[i] % q;
    out[i] = static_cast<std::uint64_t>(r < 0 ? r + q : r);
  }
  return out;
}

template <typename Mod>
std::int64_t NegacyclicNtt<Mod>::from_residue(std::uint64_t r) const {
  const std::uint64_t q = modulus();
  return r > (q - 1) / 2 ? -static_cast<std::int64_t>(q - r) : static_cast<std::int64_t>(r);
}

template <typename Mod>
std::vector<std::uint64_t> NegacyclicNtt<Mod>::multiply(std::span<const std::uint64_t> a,
                                                        std::span<const std::uint64_t> b) const {
  check_size(a, "multiply (a)");
  check_size(b, "multiply (b)");
  std::vector<std::uint64_t> fa(a.begin(), a.end());
  std::vector<std::uint64_t> fb(b.begin(), b.end());
  forward(fa);
  forward(fb);
  for (std::size_t j = 0; j < n_; ++j) fa[j] = mod_.mul(fa[j], fb[j]);
  inverse(fa);
  return fa;
}

template <typename Mod>
std::uint64_t NegacyclicNtt<Mod>::coefficient_from_transforms(std::span<const std::uint64_t> a_hat,
                                                              std::span<const std::uint64_t> b_hat,
                                                              std::size_t m) const {
  check_size(a_hat, "coefficient (a_hat)");
  check_size(b_hat, "coefficient (b_hat)");
  if (m >= n_) throw_error("NTT coefficient: index {} >= N = {}", m, n_);
  // Weight of term j: psi^(-(2j+1)m) = psi^-m * (psi^-2m)^j; both from the power table
  // (psi^-t for t >= N is -psi^-(t-N), handled by the sign of the exponent modulo 2N).
  const auto psi_inv_pow = [&](std::size_t t) {
    t %= 2 * n_;
    return t < n_ ? psi_inv_powers_[t] : mod_.sub(0, psi_inv_powers_[t - n_]);
  };
  const std::uint64_t step = psi_inv_pow(2 * m);
  std::uint64_t weight = psi_inv_pow(m);
  std::uint64_t sum = 0;
  for (std::size_t j = 0; j < n_; ++j) {
    sum = mod_.add(sum, mod_.mul(mod_.mul(a_hat[j], b_hat[j]), weight));
    weight = mod_.mul(weight, step);
  }
  return mod_.mul(sum, n_inverse_);
}

template <typename Mod>
std::uint64_t NegacyclicNtt<Mod>::dot_from_transforms(std::span<const std::uint64_t> q_hat,
                                                      std::span<const std::uint64_t> k_hat) const {
  check_size(q_hat, "dot (q_hat)");
  check_size(k_hat, "dot (k_hat)");
  std::uint64_t sum = 0;
  for (std::size_t j = 0; j < n_; ++j) sum = mod_.add(sum, mod_.mul(q_hat[j], k_hat[n_ - 1 - j]));
  return mod_.mul(sum, n_inverse_);
}

template class NegacyclicNtt<Barrett60>;
template class NegacyclicNtt<Barrett31>;

std::vector<std::int64_t> negacyclic_schoolbook(std::span<const std::int64_t> a, std::span<const std::int64_t> b) {
  const std::size_t n = a.size();
  if (b.size() != n) throw_error("negacyclic_schoolbook: lengths {} and {} differ", a.size(), b.size());
  std::vector<Int128> acc(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const Int128 p = static_cast<Int128>(a[i]) * b[j];
      if (i + j < n) {
        acc[i + j] += p;
      } else {
        acc[i + j - n] -= p;  // x^N = -1
      }
    }
  }
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (acc[i] > INT64_MAX || acc[i] < INT64_MIN) throw_error("negacyclic_schoolbook: coefficient {} overflows int64", i);
    out[i] = static_cast<std::int64_t>(acc[i]);
  }
  return out;
}

std::vector<std::int64_t> negacyclic_reverse(std::span<const std::int64_t> k) {
  const std::size_t n = k.size();
  std::vector<std::int64_t> out(n, 0);
  if (n == 0) return out;
  out[0] = k[0];
  for (std::size_t i = 1; i < n; ++i) {
    if (k[i] == INT64_MIN) throw_error("negacyclic_reverse: k[{}] = INT64_MIN cannot be negated", i);
    out[n - i] = -k[i];
  }
  return out;
}

}  // namespace okapi::exact
