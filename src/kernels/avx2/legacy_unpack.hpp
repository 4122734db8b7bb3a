// Q4_1, Q5_0 and Q5_1 (32-element blocks) against Q8_0 / Q8_1 activations, shared by quant/avx2's
// row kernels (one token) and kernels/avx2's multi-token GEMM (up to 4 tokens per pass over a
// weight row). Both run dot_legacy_tokens<W, G>, so a batched result equals the single-token one
// bit for bit. Only for files compiled with AVX2 (under an avx2/ folder).
//
// Block layouts (ggml-common.h): element j < 16 is the low nibble of qs[j], element j + 16 its
// high nibble; Q5_* add bit j of the little-endian 32-bit qh as bit 4 of element j.
//   Q4_1: w = d * q + m, q in 0..15        (pairs with Q8_1)
//   Q5_0: w = d * (q - 16), q in 0..31     (pairs with Q8_0)
//   Q5_1: w = d * q + m, q in 0..31        (pairs with Q8_1)
// The levels are kept unsigned (0..31), so _mm256_maddubs_epi16(q, a) is exact for every int8
// activation, -128 included (pair sums <= 2 * 31 * 128).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx2 {

// The 32 4-bit levels of a block, byte j = element j.
inline __m256i q4_levels(const uint8_t* qs) { return nibbles_lo_hi(load128(qs)); }

// Bit j of the block's 32-bit qh as 0x10 in byte j. Each byte of the result first gets the qh
// byte holding its bit (byte j / 8, by a shuffle within each 128-bit lane), then tests bit j % 8.
inline __m256i q5_high_bits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(qh)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit_of_byte = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i is_set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_of_byte), bit_of_byte);
  return _mm256_and_si256(is_set, _mm256_set1_epi8(0x10));
}

// The 32 5-bit levels (0..31) of a block, byte j = element j.
inline __m256i q5_levels(const uint8_t* qs, const uint8_t* qh) {
  return _mm256_or_si256(q4_levels(qs), q5_high_bits(qh));
}

// Per-format traits: block types, level unpacking, the symmetric offset, whether there is a min.
struct Q4_1Weights {
  using Block = block_q4_1;
  using Act = block_q8_1;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static __m256i levels(const Block& b) { return q4_levels(b.qs); }
};
struct Q5_0Weights {
  using Block = block_q5_0;
  using Act = block_q8_0;
  static constexpr int kOffset = 16;
  static constexpr bool kHasMin = false;
  static __m256i levels(const Block& b) { return q5_levels(b.qs, b.qh); }
};
struct Q5_1Weights {
  using Block = block_q5_1;
  using Act = block_q8_1;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static __m256i levels(const Block& b) { return q5_levels(b.qs, b.qh); }
};

// out[t] = dot(weight row x, activation row t), t < G; activation rows are a_row bytes apart.
// Per block: the exact integer dot sum(q * a) - kOffset * sum(a) in 8 int32 lanes, times
// d_w * d_a in float, accumulated into two 8-lane sums (even and odd blocks); the min term
// m * s (s = Q8_1's stored d * sum(a)) goes to a scalar sum, added at the end.
template <typename W, int G>
inline void dot_legacy_tokens(int64_t n_blocks, const typename W::Block* x, const uint8_t* a, size_t a_row,
                              float* out) {
  using Act = typename W::Act;
  __m256 acc[G][2];
  float acc_min[G];
  for (int t = 0; t < G; ++t) {
    acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    acc_min[t] = 0.0f;
  }
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(W::kOffset));
  // `parity` is a constant after inlining, so the accumulators stay in registers.
  auto block = [&](int64_t b, int parity) {
    const __m256i q = W::levels(x[b]);
    const float d_w = half_to_float(x[b].d);
    for (int t = 0; t < G; ++t) {
      const Act& act = reinterpret_cast<const Act*>(a + static_cast<size_t>(t) * a_row)[b];
      const __m256i av = load256(act.qs);
      __m256i pairs = _mm256_maddubs_epi16(q, av);
      if constexpr (W::kOffset != 0) pairs = _mm256_sub_epi16(pairs, _mm256_maddubs_epi16(offset, av));
      const __m256 d = _mm256_set1_ps(d_w * half_to_float(act.d));
      acc[t][parity] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum_i16_pairs(pairs)), acc[t][parity]);
      if constexpr (W::kHasMin) acc_min[t] += half_to_float(x[b].m) * half_to_float(act.s);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    block(b, 0);
    block(b + 1, 1);
  }
  if (b < n_blocks) block(b, 0);
  for (int t = 0; t < G; ++t) out[t] = hsum(_mm256_add_ps(acc[t][0], acc[t][1])) + acc_min[t];
}

}  // namespace okapi::quant::avx2
