#include "kv/exact_ntt_keys.hpp"

#include <bit>
#include <span>

#include "core/error.hpp"
#include "exact/matvec.hpp"
#include "kv/exact_kernels.hpp"

namespace okapi::kv {

namespace {

// 2N must divide q-1 = 8796093022345 * 2^16, so N <= 2^15.
constexpr std::int64_t kMaxNttSize = std::int64_t{1} << 15;

std::size_t ntt_size(std::int64_t head_dim) {
  if (head_dim <= 0 || head_dim > kMaxNttSize)
    throw_error("exact KV store (NTT): head dim {} must be in [1, {}] (2N must divide q-1)", head_dim, kMaxNttSize);
  return std::bit_ceil(static_cast<std::size_t>(head_dim < 2 ? 2 : head_dim));
}

// Terms per unreduced 128-bit sum: 256 (q-1)^2 < 2^8 * 2^118.0001 < 2^127.
constexpr std::size_t kTermsPerReduction = 256;

// The forward transform of k_int[0, head_dim) zero padded to `ntt`'s size, into out.
template <typename Ntt>
void transform_padded(const Ntt& ntt, const std::int16_t* k_int, std::int64_t head_dim, std::uint64_t* out) {
  const std::uint64_t q = ntt.modulus();
  const std::size_t n = ntt.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t v = static_cast<std::int64_t>(i) < head_dim ? k_int[i] : 0;
    out[i] = v < 0 ? q - static_cast<std::uint64_t>(-v) : static_cast<std::uint64_t>(v);
  }
  ntt.forward(std::span<std::uint64_t>(out, n));
}

}  // namespace

NttKeys::NttKeys(std::int64_t head_dim) : head_dim_(head_dim), ntt_(exact::kNttPrime60, ntt_size(head_dim)) {
  // |<q_int, k_int>| <= head_dim * 32767^2 must fit (q-1)/2 for from_residue to return the dot.
  const exact::Accumulator acc =
      exact::pick_ntt_accumulator(kExactIntMax, kExactIntMax, static_cast<std::size_t>(head_dim));
  if (acc != exact::Accumulator::ntt60)
    throw_error("exact KV store (NTT): head dim {} needs the CRT accumulator; the 60-bit NTT is not exact", head_dim);
  const exact::Barrett60& mod = ntt_.arithmetic();
  n_inverse_ = exact::inverse_mod(mod, static_cast<std::uint64_t>(ntt_.size()));
  two64_mod_q_ = static_cast<std::uint64_t>((static_cast<exact::UInt128>(1) << 64) % ntt_.modulus());
}

void NttKeys::transform_key(const std::int16_t* k_int, std::uint64_t* out) const {
  transform_padded(ntt_, k_int, head_dim_, out);
}

void NttKeys::prepare_query(const std::int16_t* q_int, std::uint64_t* prepared) const {
  const std::size_t n = ntt_.size();
  transform_key(q_int, prepared);
  const exact::Barrett60& mod = ntt_.arithmetic();
  for (std::size_t i = 0; i < n / 2; ++i) std::swap(prepared[i], prepared[n - 1 - i]);
  for (std::size_t i = 0; i < n; ++i) prepared[i] = mod.mul(prepared[i], n_inverse_);
}

// sum = hi 2^64 + lo with hi < 2^63; 2^64 = R (mod q), R < q:
//   s1 = hi R + lo < 2^63 q + 2^64 < 2^123, and its high word h1 < q/2 + 1;
//   s2 = h1 R + lo1 < (q/2 + 1) q + 2^64 < q^2, the input range of Barrett60::reduce.
std::uint64_t NttKeys::reduce_sum(exact::UInt128 sum) const {
  const exact::UInt128 s1 = static_cast<exact::UInt128>(static_cast<std::uint64_t>(sum >> 64)) * two64_mod_q_ +
                            static_cast<std::uint64_t>(sum);
  const exact::UInt128 s2 =
      static_cast<exact::UInt128>(static_cast<std::uint64_t>(s1 >> 64)) * two64_mod_q_ + static_cast<std::uint64_t>(s1);
  return ntt_.arithmetic().reduce(s2);
}

std::int64_t NttKeys::dot(const std::uint64_t* prepared, const std::uint64_t* k_hat) const {
  const std::size_t n = ntt_.size();
  const exact::Barrett60& mod = ntt_.arithmetic();
  std::uint64_t residue = 0;
  for (std::size_t start = 0; start < n; start += kTermsPerReduction) {
    const std::size_t end = start + kTermsPerReduction < n ? start + kTermsPerReduction : n;
    // Two partial sums (even / odd i) let the multiplies overlap; each stays below 2^127.
    exact::UInt128 even = 0, odd = 0;
    std::size_t i = start;
    for (; i + 2 <= end; i += 2) {
      even += static_cast<exact::UInt128>(prepared[i]) * k_hat[i];
      odd += static_cast<exact::UInt128>(prepared[i + 1]) * k_hat[i + 1];
    }
    if (i < end) even += static_cast<exact::UInt128>(prepared[i]) * k_hat[i];
    residue = mod.add(residue, mod.add(reduce_sum(even), reduce_sum(odd)));
  }
  return ntt_.from_residue(residue);
}

NttCrtKeys::NttCrtKeys(std::int64_t head_dim) : head_dim_(head_dim), crt_(ntt_size(head_dim)) {
  const double bound = static_cast<double>(head_dim) * kExactIntMax * kExactIntMax;
  if (bound >= static_cast<double>(crt_.garner().max_magnitude())) {
    throw_error("exact KV store (NTT-CRT): head dim {} can exceed the CRT range", head_dim);
  }
  const std::uint64_t n = crt_.size();
  n_inverse1_ = exact::inverse_mod(crt_.ring1().arithmetic(), n);
  n_inverse2_ = exact::inverse_mod(crt_.ring2().arithmetic(), n);
}

void NttCrtKeys::transform_key(const std::int16_t* k_int, std::uint64_t* out) const {
  transform_padded(crt_.ring1(), k_int, head_dim_, out);
  transform_padded(crt_.ring2(), k_int, head_dim_, out + crt_.size());
}

void NttCrtKeys::prepare_query(const std::int16_t* q_int, std::uint64_t* prepared) const {
  const std::size_t n = crt_.size();
  transform_key(q_int, prepared);
  for (int ring = 0; ring < 2; ++ring) {
    const exact::Barrett31& mod = (ring == 0 ? crt_.ring1() : crt_.ring2()).arithmetic();
    const std::uint64_t n_inverse = ring == 0 ? n_inverse1_ : n_inverse2_;
    std::uint64_t* p = prepared + ring * n;
    for (std::size_t i = 0; i < n / 2; ++i) std::swap(p[i], p[n - 1 - i]);
    for (std::size_t i = 0; i < n; ++i) p[i] = mod.mul(p[i], n_inverse);
  }
}

std::int64_t NttCrtKeys::dot(const std::uint64_t* prepared, const std::uint64_t* k_hat) const {
  const std::size_t n = crt_.size();
  std::uint64_t residues[2];
  for (int ring = 0; ring < 2; ++ring) {
    const exact::Barrett31& mod = (ring == 0 ? crt_.ring1() : crt_.ring2()).arithmetic();
    const std::uint64_t q = mod.modulus();
    const std::uint64_t* p = prepared + ring * n;
    const std::uint64_t* k = k_hat + ring * n;
    // Products < q^2 < 2^60: eight of them and a residue < q stay below 2^63.
    std::uint64_t residue = 0;
    for (std::size_t start = 0; start < n; start += 8) {
      std::uint64_t sum = residue;
      for (std::size_t i = start; i < start + 8 && i < n; ++i) sum += p[i] * k[i];
      residue = sum % q;
    }
    residues[ring] = residue;
  }
  return crt_.garner().combine(residues[0], residues[1]);
}

}  // namespace okapi::kv
