// Q2_K, Q3_K and Q5_K super-blocks (256 elements) against Q8_K activations, shared by quant/avx2's
// row kernels (one token) and kernels/avx2's multi-token GEMM (up to 4 tokens per pass over a
// weight row). Both run dot_q*_K_tokens<G>, so a batched result equals the single-token one bit
// for bit. Only for files compiled with AVX2 (under an avx2/ folder).
//
// Every kernel keeps the weight levels unsigned (Q3_K's -4 is a separate term), so
// _mm256_maddubs_epi16(levels, a) is exact for every int8 activation, -128 included; the
// integer dot of a super-block is exact in int32 lanes and is scaled once by d_w * d_a in float.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/avx2/kquant_unpack.hpp"
#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx2 {

// Right shift of every 16-bit lane by a run-time count.
inline __m256i shift_right16(__m256i v, int count) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(count)); }

// Elements 128h + 32k + l (l < 32) of Q2_K / Q3_K: 2 bits of qs[32h + l] at bit 2k, as bytes 0..3.
inline __m256i crumbs(__m256i qs_half, int k) {
  return _mm256_and_si256(shift_right16(qs_half, 2 * k), _mm256_set1_epi8(3));
}

// Q2_K / Q3_K / Q6_K scales of 16-element groups: with `scales16` holding the 8 int16 scales of
// groups 8h..8h+7 in both 128-bit lanes, the scale of group 8h+2k in the low lane and of 8h+2k+1
// in the high lane (elements 32k..32k+15 and 32k+16..32k+31 of half h), picked by a byte shuffle.
inline __m256i group16_scales(__m256i scales16, int k) {
  const auto low = static_cast<int16_t>(0x0100 + 0x0202 * (2 * k));
  const auto high = static_cast<int16_t>(0x0100 + 0x0202 * (2 * k + 1));
  return _mm256_shuffle_epi8(scales16, _mm256_set_m128i(_mm_set1_epi16(high), _mm_set1_epi16(low)));
}

// 8 int8 values (groups 8h..8h+7 of `bytes`, h = 0 or 1) as int16 in both 128-bit lanes.
inline __m256i half_scales16(__m128i bytes, int h, bool is_signed) {
  const __m128i eight = h == 0 ? bytes : _mm_srli_si128(bytes, 8);
  return _mm256_broadcastsi128_si256(is_signed ? _mm_cvtepi8_epi16(eight) : _mm_cvtepu8_epi16(eight));
}

// The 16 signed 6-bit scales (-32..31) of a Q3_K block, one per byte. Scale j: low nibble in
// scales[j % 8] (high nibble for j >= 8), bits 4-5 in scales[8 + j % 4] at bit 2 * (j / 4);
// stored + 32. Done on 32-bit words: word w of the result holds scales 4w..4w+3.
inline __m128i unpack_q3_K_scales(const uint8_t* s) {
  uint32_t w[3];
  std::memcpy(w, s, sizeof(w));
  const uint32_t low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
  const __m128i stored = _mm_setr_epi32(static_cast<int32_t>((w[0] & low4) | (((w[2] >> 0) & low2) << 4)),
                                        static_cast<int32_t>((w[1] & low4) | (((w[2] >> 2) & low2) << 4)),
                                        static_cast<int32_t>(((w[0] >> 4) & low4) | (((w[2] >> 4) & low2) << 4)),
                                        static_cast<int32_t>(((w[1] >> 4) & low4) | (((w[2] >> 6) & low2) << 4)));
  return _mm_sub_epi8(stored, _mm_set1_epi8(32));
}

// ---- Q2_K: w = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4), q in 0..3, g = e / 16 ----
// isum = sum_g sc_g * dot(q_g, a_g), msum = sum_g min_g * bsum_g (both exact), then
// acc += d*d_a * isum (8 lanes), acc_min += dmin*d_a * msum.
template <int G>
inline void dot_q2_K_tokens(int64_t n_blocks, const block_q2_K* x, const uint8_t* a, size_t a_row, float* out) {
  __m256 acc[G];
  float acc_min[G];
  for (int t = 0; t < G; ++t) {
    acc[t] = _mm256_setzero_ps();
    acc_min[t] = 0.0f;
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    const block_q8_K* y[G];
    for (int t = 0; t < G; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row) + b;
    const __m128i packed = load128(x[b].scales);
    const __m128i scales = _mm_and_si128(packed, _mm_set1_epi8(0x0f));
    const __m128i mins = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f));
    __m256i isum[G];
    for (int t = 0; t < G; ++t) isum[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs_half = load256(x[b].qs + 32 * h);
      const __m256i scales16 = half_scales16(scales, h, false);
      for (int k = 0; k < 4; ++k) {
        const __m256i q = crumbs(qs_half, k);
        const __m256i group_scale = group16_scales(scales16, k);
        for (int t = 0; t < G; ++t) {
          const __m256i pairs = _mm256_maddubs_epi16(q, load256(y[t]->qs + 128 * h + 32 * k));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pairs, group_scale));
        }
      }
    }
    const __m256i mins16 = _mm256_cvtepu8_epi16(mins);
    const float d = half_to_float(x[b].d), dmin = half_to_float(x[b].dmin);
    for (int t = 0; t < G; ++t) {
      const int32_t msum = hsum_i32(_mm256_madd_epi16(mins16, load256(y[t]->bsums)));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y[t]->d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
      acc_min[t] += dmin * y[t]->d * static_cast<float>(msum);
    }
  }
  for (int t = 0; t < G; ++t) out[t] = hsum(acc[t]) - acc_min[t];
}

// ---- Q3_K: w = d * scale_g * (q - 4 * (1 - hbit)), q in 0..3 (crumbs of qs), g = e / 16 ----
// Element 128h + 32k + l has its high bit in hmask[l] bit 4h + k. The dot is
// sum_g scale_g * (dot(q_g, a_g) - dot(4 * missing_hbit_g, a_g)), exact; acc += d*d_a * isum.
template <int G>
inline void dot_q3_K_tokens(int64_t n_blocks, const block_q3_K* x, const uint8_t* a, size_t a_row, float* out) {
  __m256 acc[G];
  for (int t = 0; t < G; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const block_q8_K* y[G];
    for (int t = 0; t < G; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row) + b;
    const __m128i scales = unpack_q3_K_scales(x[b].scales);
    const __m256i hmask = load256(x[b].hmask);
    __m256i isum[G];
    for (int t = 0; t < G; ++t) isum[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs_half = load256(x[b].qs + 32 * h);
      const __m256i scales16 = half_scales16(scales, h, true);
      for (int k = 0; k < 4; ++k) {
        const __m256i q = crumbs(qs_half, k);
        const __m256i hbit = _mm256_and_si256(shift_right16(hmask, 4 * h + k), one);
        const __m256i minus4 = _mm256_slli_epi16(_mm256_andnot_si256(hbit, one), 2);  // 4 where hbit is clear
        const __m256i group_scale = group16_scales(scales16, k);
        for (int t = 0; t < G; ++t) {
          const __m256i av = load256(y[t]->qs + 128 * h + 32 * k);
          const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, av), _mm256_maddubs_epi16(minus4, av));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pairs, group_scale));
        }
      }
    }
    const float d = half_to_float(x[b].d);
    for (int t = 0; t < G; ++t) acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y[t]->d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
  }
  for (int t = 0; t < G; ++t) out[t] = hsum(acc[t]);
}

// ---- Q5_K: Q4_K's scales and mins (unpack_q4_K_scales) and nibbles plus a fifth bit ----
// Sub-block j (32 elements): low 4 bits in qs[32 * (j / 2) + l] (low nibble for even j), bit 4 in
// qh[l] bit j. isum = sum_j scale_j * dot(q_j, a_j), msum = sum_j min_j * (bsum_2j + bsum_2j+1),
// then acc += d*d_a * isum, acc_min += dmin*d_a * msum (as vec_dot_q4_K_q8_K).
template <int G>
inline void dot_q5_K_tokens(int64_t n_blocks, const block_q5_K* x, const uint8_t* a, size_t a_row, float* out) {
  __m256 acc[G];
  float acc_min[G];
  for (int t = 0; t < G; ++t) {
    acc[t] = _mm256_setzero_ps();
    acc_min[t] = 0.0f;
  }
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const block_q8_K* y[G];
    for (int t = 0; t < G; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + static_cast<size_t>(t) * a_row) + b;
    const ScalesMins sm = unpack_q4_K_scales(x[b].scales);
    const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm.scales));
    const __m256i qh = load256(x[b].qh);
    __m256i isum[G];
    for (int t = 0; t < G; ++t) isum[t] = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p+1 (high nibbles)
      const __m256i bytes = load256(x[b].qs + 32 * p);
      const __m256i bit_lo = _mm256_slli_epi16(_mm256_and_si256(shift_right16(qh, 2 * p), one), 4);
      const __m256i bit_hi = _mm256_slli_epi16(_mm256_and_si256(shift_right16(qh, 2 * p + 1), one), 4);
      const __m256i q_lo = _mm256_or_si256(_mm256_and_si256(bytes, low4), bit_lo);
      const __m256i q_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), bit_hi);
      const __m256i scale_lo = _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * p))));
      const __m256i scale_hi =
          _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * p + 1))));
      for (int t = 0; t < G; ++t) {
        const __m256i lo = _mm256_maddubs_epi16(q_lo, load256(y[t]->qs + 64 * p));
        const __m256i hi = _mm256_maddubs_epi16(q_hi, load256(y[t]->qs + 64 * p + 32));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(lo, scale_lo));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(hi, scale_hi));
      }
    }
    const __m128i mins = _mm_cvtepu8_epi16(sm.mins);
    const float d = half_to_float(x[b].d), dmin = half_to_float(x[b].dmin);
    for (int t = 0; t < G; ++t) {
      const __m256i bs = load256(y[t]->bsums);
      const __m128i pair_sums = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const int32_t msum = hsum_i32(_mm_madd_epi16(pair_sums, mins));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y[t]->d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
      acc_min[t] += dmin * y[t]->d * static_cast<float>(msum);
    }
  }
  for (int t = 0; t < G; ++t) out[t] = hsum(acc[t]) - acc_min[t];
}

}  // namespace okapi::quant::avx2
