// The NTT-domain keys of the exact store (ExactScores::Ntt): a key row k_int of head_dim int16 is
// kept as the negacyclic transform Khat (N = next power of two >= head_dim, at least 2, zero
// padded) over exact::kNttPrime60, and <q_int, k_int> is read from Qhat and Khat in O(N):
//   <q, k> = (1/N) sum_j Qhat_j Khat_(N-1-j)  (mod q)       (NegacyclicNtt::dot_from_transforms)
// The query is prepared once per call as P_i = Qhat_(N-1-i) / N, so per key only
// sum_i P_i Khat_i mod q remains: 128-bit products summed without reduction, one reduction per
// 256 terms. The residue is the exact dot because |<q, k>| <= head_dim * 32767^2 <= (q-1)/2
// (checked at construction through exact::pick_ntt_accumulator).
#pragma once
#include <cstddef>
#include <cstdint>

#include "exact/crt.hpp"
#include "exact/ntt.hpp"

namespace okapi::kv {

// What the exact store needs of NTT-domain keys (both kinds below).
class TransformedKeys {
 public:
  virtual ~TransformedKeys() = default;
  virtual std::size_t size() const = 0;  // uint64 residues per key row
  // out[size()] = the transform of k_int[0, head_dim) (zero padded).
  virtual void transform_key(const std::int16_t* k_int, std::uint64_t* out) const = 0;
  // prepared[size()]: the query prepared once per call.
  virtual void prepare_query(const std::int16_t* q_int, std::uint64_t* prepared) const = 0;
  // The exact <q_int, k_int> from the prepared query and the key transform.
  virtual std::int64_t dot(const std::uint64_t* prepared, const std::uint64_t* k_hat) const = 0;
};

class NttKeys final : public TransformedKeys {
 public:
  explicit NttKeys(std::int64_t head_dim);  // throws okapi::Error when the bound cannot hold

  std::size_t size() const override { return ntt_.size(); }  // N
  const exact::Ntt60& ntt() const { return ntt_; }

  // out[N] = Khat of k_int[0, head_dim) (zero padded).
  void transform_key(const std::int16_t* k_int, std::uint64_t* out) const override;
  // prepared[N]: P_i = Qhat_(N-1-i) * N^-1 mod q.
  void prepare_query(const std::int16_t* q_int, std::uint64_t* prepared) const override;
  std::int64_t dot(const std::uint64_t* prepared, const std::uint64_t* k_hat) const override;

 private:
  std::uint64_t reduce_sum(exact::UInt128 sum) const;  // sum < 2^127 -> sum mod q

  std::int64_t head_dim_;
  exact::Ntt60 ntt_;
  std::uint64_t n_inverse_;
  std::uint64_t two64_mod_q_;  // 2^64 mod q
};

// The same NTT-domain keys on the two ~30-bit primes of exact/crt.hpp (ExactScores::NttCrt,
// --exact-attention ntt-crt): no 128-bit arithmetic anywhere. A key row is kept as its two
// transforms (2N residues < 2^30); per key, sum_i P_i Khat_i is taken mod each prime from 64-bit
// partial sums (8 products < 2^60 each, then a reduction), and Garner's CRT joins the two residues
// into the signed dot, exact because |<q, k>| <= head_dim * 32767^2 < (q1 q2 - 1) / 2 ~ 2^59
// (checked at construction).
class NttCrtKeys final : public TransformedKeys {
 public:
  explicit NttCrtKeys(std::int64_t head_dim);  // throws okapi::Error when the bound cannot hold

  std::size_t size() const override { return 2 * crt_.size(); }  // residues per key: N for each prime

  // out[2N] = Khat mod q1, then Khat mod q2, of k_int[0, head_dim) (zero padded).
  void transform_key(const std::int16_t* k_int, std::uint64_t* out) const override;
  // prepared[2N]: per prime, P_i = Qhat_(N-1-i) * N^-1 mod q.
  void prepare_query(const std::int16_t* q_int, std::uint64_t* prepared) const override;
  std::int64_t dot(const std::uint64_t* prepared, const std::uint64_t* k_hat) const override;

 private:
  std::int64_t head_dim_;
  exact::DualPrimeNtt crt_;
  std::uint64_t n_inverse1_, n_inverse2_;
};

}  // namespace okapi::kv
