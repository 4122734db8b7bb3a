// Q4_K and Q6_K rows (256-element super-blocks) and the Q8_K activation quantizer.
#include "kernels/avx2/kquant_unpack.hpp"
#include "kernels/avx2/row_kernels.hpp"
#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx2 {
namespace {

// Lane j of v in all 8 lanes.
__m256 broadcast_lane(__m256 v, int j) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j)); }

// The reference keeps the first element of largest magnitude (its sign matters).
float first_absmax_value(const float* x, __m256 absmax) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(absmax), _mm256_extractf128_ps(absmax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const __m256 target = _mm256_set1_ps(_mm_cvtss_f32(m));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int i = 0; i < QK_K; i += 8) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), target, _CMP_EQ_OQ));
    if (hits != 0) return x[i + __builtin_ctz(static_cast<unsigned>(hits))];
  }
  return 0.0f;  // only for NaN input
}

// Sum of each 16 signed bytes of the 256 quants: bias to unsigned (+128), sum with psadbw.
void q8_K_bsums(const int8_t* qs, int16_t* bsums) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int g = 0; g < QK_K / 32; ++g) {
    const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(load256(qs + 32 * g), bias), _mm256_setzero_si256());
    alignas(32) int64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
    bsums[2 * g] = static_cast<int16_t>(lanes[0] + lanes[1] - 16 * 128);
    bsums[2 * g + 1] = static_cast<int16_t>(lanes[2] + lanes[3] - 16 * 128);
  }
}

// 32 unsigned levels (bytes 0..15) -> scale * q - min, the product rounded before the subtraction.
void store_affine_u8x32(__m256i q, __m256 scale, __m256 min, float* out) {
  const __m128i lo = _mm256_castsi256_si128(q);
  const __m128i hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
    _mm256_storeu_ps(out + 8 * k, _mm256_sub_ps(mul_rounded(scale, v), min));
  }
}

}  // namespace

// y = (d*scale) * q - (dmin*min), each product rounded, then the subtraction (as the reference).
void dequantize_q4_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q4_K*>(src);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q4_K& blk = blocks[b];
    const float d = half_to_float(blk.d);
    const float dmin = half_to_float(blk.dmin);
    const ScalesMins sm = unpack_q4_K_scales(blk.scales);
    // d * scale_j and dmin * min_j for all j: the same single roundings as the scalar products.
    const __m256 ds = mul_rounded(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm.scales)));
    const __m256 dm = mul_rounded(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm.mins)));
    float* out = dst + b * QK_K;
    for (int j = 0; j < 8; j += 2) {  // sub-blocks j and j+1: low and high nibbles of 32 bytes
      const __m256i bytes = load256(blk.qs + 16 * j);
      const __m256i q[2] = {_mm256_and_si256(bytes, low4), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4)};
      for (int h = 0; h < 2; ++h) {
        store_affine_u8x32(q[h], broadcast_lane(ds, j + h), broadcast_lane(dm, j + h), out + 32 * (j + h));
      }
    }
  }
}

// y = (d*scale) * (q - 32); q = 4 low bits from ql, 2 high bits from qh.
void dequantize_q6_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q6_K*>(src);
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q6_K& blk = blocks[b];
    const float d = half_to_float(blk.d);
    for (int half = 0; half < 2; ++half) {
      // d * scale for the 8 groups of 16 of this half (the reference's first product).
      const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales + 8 * half));
      const __m256 ds = mul_rounded(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)));
      const Q6Quarters levels = unpack_q6_K_half(blk, half);
      for (int k = 0; k < 4; ++k) {
        const __m256i qs = _mm256_sub_epi8(levels.q[k], offset);
        float* out = dst + b * QK_K + 128 * half + 32 * k;  // groups of 16: 2k and 2k+1 of this half
        const __m256 s0 = broadcast_lane(ds, 2 * k);
        const __m256 s1 = broadcast_lane(ds, 2 * k + 1);
        const __m128i lo = _mm256_castsi256_si128(qs);
        const __m128i hi = _mm256_extracti128_si256(qs, 1);
        _mm256_storeu_ps(out + 0, mul_rounded(s0, i8x8_to_float(lo)));
        _mm256_storeu_ps(out + 8, mul_rounded(s0, i8x8_to_float(_mm_srli_si128(lo, 8))));
        _mm256_storeu_ps(out + 16, mul_rounded(s1, i8x8_to_float(hi)));
        _mm256_storeu_ps(out + 24, mul_rounded(s1, i8x8_to_float(_mm_srli_si128(hi, 8))));
      }
    }
  }
}

void quantize_q8_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q8_K*>(dst);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float* x = src + b * QK_K;
    block_q8_K& out = blocks[b];
    __m256 absmax = _mm256_setzero_ps();
    // max_ps returns its second operand when the first is NaN: NaNs are skipped, as in the reference.
    for (int i = 0; i < QK_K; i += 8) absmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), absmax);
    const float max = first_absmax_value(x, absmax);
    if (max == 0.0f) {
      out.d = 0.0f;
      std::memset(out.qs, 0, sizeof(out.qs));
      std::memset(out.bsums, 0, sizeof(out.bsums));
      continue;
    }
    const float iscale = -127.0f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i hi = _mm256_set1_epi32(127);
    for (int i = 0; i < QK_K; i += 32) {
      __m256i q32[4];
      for (int k = 0; k < 4; ++k) {
        // cvtps rounds to nearest even, as the reference's nearest_int() (|v| <= 127 here).
        q32[k] = _mm256_min_epi32(_mm256_cvtps_epi32(mul_rounded(is, _mm256_loadu_ps(x + i + 8 * k))), hi);
      }
      const __m256i q8 = _mm256_packs_epi16(_mm256_packs_epi32(q32[0], q32[1]), _mm256_packs_epi32(q32[2], q32[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs + i),
                          _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    q8_K_bsums(out.qs, out.bsums);
    out.d = 1.0f / iscale;
  }
}

// Per block: isum = sum_j scale_j * dot(q_j, a_j) exactly in int32 lanes; the mins term
// sum_j min_j * (bsum_2j + bsum_2j+1) exactly; then acc += d*d_a*isum, accmin += dmin*d_a*msum.
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q4_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const ScalesMins sm = unpack_q4_K_scales(x[b].scales);
    // The 8 scales as int16 in both 128-bit halves; scale j is broadcast with a byte shuffle.
    const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm.scales));
    const int8_t* q8 = y[b].qs;
    __m256i isum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {  // 64 elements: low nibbles then high nibbles of 32 bytes
      const __m256i bytes = load256(x[b].qs + 32 * j);
      const __m256i lo = _mm256_maddubs_epi16(_mm256_and_si256(bytes, low4), load256(q8 + 64 * j));
      const __m256i hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), load256(q8 + 64 * j + 32));
      const __m256i scale_lo = _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * j))));
      const __m256i scale_hi = _mm256_shuffle_epi8(scales16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * j + 1))));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(lo, scale_lo));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(hi, scale_hi));
    }
    // bsums pairs (one per 32-element sub-block) times the mins.
    const __m256i bs = load256(y[b].bsums);
    const __m128i pair_sums = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i mins = _mm_cvtepu8_epi16(sm.mins);
    const int32_t msum = hsum_i32(_mm_madd_epi16(pair_sums, mins));
    const float da = y[b].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[b].d) * da), _mm256_cvtepi32_ps(isum), acc);
    acc_min += half_to_float(x[b].dmin) * da * static_cast<float>(msum);
  }
  return hsum(acc) - acc_min;
}

// sum_g scale_g * sum((q-32)*a) = sum_g scale_g * dot(q, a) - 32 * sum_g scale_g * bsum_g,
// q in 0..63 unsigned, so every int8 activation is exact.
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q6_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const block_q6_K& blk = x[b];
    const int8_t* q8 = y[b].qs;
    __m256i isum = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      // The 8 int16 scales of this half in both 128-bit lanes; a byte shuffle picks scale 2k for
      // the low lane (elements 0-15 of quarter k) and 2k+1 for the high lane.
      const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales + 8 * half));
      const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
      const Q6Quarters levels = unpack_q6_K_half(blk, half);
      for (int k = 0; k < 4; ++k) {
        const int g = 8 * half + 2 * k;
        const __m256i pairs = _mm256_maddubs_epi16(levels.q[k], load256(q8 + 16 * g));
        const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * k + 1))),
                                              _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * k))));
        const __m256i scale = _mm256_shuffle_epi8(scales16, pick);
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, scale));
      }
    }
    // The -32 offset: 32 * scale_g * bsum_g, lane-wise (exact in int32; |lane| < 2^27).
    const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(load128(blk.scales)), load256(y[b].bsums));
    isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(offset, 5));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(blk.d) * y[b].d), _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum(acc);
}

}  // namespace okapi::quant::avx2
