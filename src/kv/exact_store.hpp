// KV stores for exact mode (seed 000). K and V are kept as integers with one scale per token and
// kv head; scores and value sums are exact integer sums, rescaled once, so every float they return
// depends only on the inputs (not on threads, SIMD width, compiler or optimisation level).
//
//   encoding: for a vector x of one token and head, s = max|x| / 32767 (s = 1 for a zero vector),
//             x_int = round-half-away(x / s) in [-32767, 32767] (int16 range, 16-bit precision).
//   scores:   q is encoded the same way (scale s_q) per call; score_j = (float)((double)dot_j *
//             ((double)s_q * (double)s_k_j)) with dot_j = <q_int, k_int_j> exact in int64.
//   values:   p'_j = probs_j * s_v_j (float), encoded with one scale s_p over [first, last);
//             out[d] = (float)((double)sum_j p'_int_j v_int_jd * (double)s_p), exact int64 sums.
//
// Two ways to compute dot_j, selectable for comparison:
//   Ntt:    K is transformed once when written (negacyclic NTT of size N = next power of two
//           >= head_dim, zero-padded, over the 60-bit prime of exact/ntt.hpp) and kept in the NTT
//           domain; q is transformed once per call; dot_j is read from the transforms with the
//           O(N) weighted pointwise sum (NegacyclicNtt::dot_from_transforms), no inverse NTT.
//   Direct: K kept as int16; dot_j is the plain integer dot product (AVX2 when available).
// Both return identical scores (tested). The bound n * 32767^2 <= (q-1)/2 holds for head_dim up
// to 2^28, checked at construction with exact/matvec.hpp's pick_ntt_accumulator.
#pragma once
#include <memory>
#include <string_view>

#include "core/cpu.hpp"
#include "kv/kv_store.hpp"

namespace okapi::kv {

// Ntt: keys as negacyclic transforms over one 60-bit prime (128-bit products); NttCrt: over two
// 30-bit primes joined by Garner's CRT (64-bit arithmetic only); Direct: int16 dot products. All
// three give the same exact integer scores.
enum class ExactScores { Ntt, Direct, NttCrt };

// type_name(): "exact-ntt", "exact-ntt-crt" or "exact-direct". `tier` (one of available_isas(),
// the backend's) picks the integer kernels: AVX2 from the avx2 tier up, else the scalar ones (the
// same integers). Throws okapi::Error on a non-positive shape or a store larger than the memory
// left (check_store_fits).
std::unique_ptr<KvStore> make_exact_store(const KvShape& shape, ExactScores scores, Isa tier);

// The bytes make_exact_store(shape, scores) allocates, computed without allocating (as CacheTypes::bytes).
double exact_store_bytes(const KvShape& shape, ExactScores scores);

// True for the stores above (ExactOps refuses any other store: float stores are not exact).
bool is_exact_store(const KvStore& store);

}  // namespace okapi::kv
