// TQ2_0 rows: 2-bit ternary (q in 0..2 stands for q-1), one fp16 scale per 256 elements.
// Byte m of each 32-byte half holds elements m, m+32, m+64, m+96 of that half in bits 0-1,
// 2-3, 4-5, 6-7.
// I2_S rows (bitnet.cpp's x86 layout, unit scale): byte g of a 128-value block holds values g,
// g+32, g+64, g+96 in bits 7-6, 5-4, 3-2, 1-0 (codes 0..2 for -1..1; 3 reads as +2).
#include <cstring>

#include "kernels/avx2/row_kernels.hpp"
#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx2 {

void dequantize_tq2_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_tq2_0*>(src);
  const __m256i mask = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const __m256 d = _mm256_set1_ps(half_to_float(blocks[b].d));
    float* out = dst + b * QK_K;
    for (int half = 0; half < 2; ++half) {
      const __m256i bytes = load256(blocks[b].qs + 32 * half);
      for (int l = 0; l < 4; ++l) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * l), mask);
        store_scaled_i8x32(_mm256_sub_epi8(q, one), d, out + 128 * half + 32 * l);
      }
    }
  }
}

// sum((q-1)*a) = sum(q*a) - sum(a); sum(a) from the Q8_K bsums. The int16 pair sums stay small
// (|q*a| pairs <= 512, eight of them added <= 4096), so they are summed before widening.
// The per-block float step has the reference's order, sum += float(isum) * (d_a * d_w), but the
// compiler may fuse it into one FMA, so results can differ from the reference in the last bits.
float vec_dot_tq2_0_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_tq2_0*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  const __m256i mask = _mm256_set1_epi8(3);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const int8_t* q8 = y[b].qs;
    __m256i pairs = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i bytes = load256(x[b].qs + 32 * half);
      for (int l = 0; l < 4; ++l) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * l), mask);
        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(q, load256(q8 + 128 * half + 32 * l)));
      }
    }
    const __m256i bsums = sum_i16_pairs(load256(y[b].bsums));
    const int32_t isum = hsum_i32(_mm256_sub_epi32(sum_i16_pairs(pairs), bsums));
    sum += static_cast<float>(isum) * (y[b].d * half_to_float(x[b].d));
  }
  return sum;
}

// bitnet.cpp's I2_S x I8_S dot at unit scale: sum((code-1)*q) over the row in int32 (per 32
// values: maddubs of the codes (<= 3) and of ones against the levels, subtracted as int16 pairs,
// |pair| <= 768 + 256), then (float)sum / s as the reference. The caller applies the tensor scale.
float vec_dot_i2_s_i8_s(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint8_t*>(w);
  float s;
  std::memcpy(&s, a, sizeof(s));
  const auto* q = static_cast<const int8_t*>(a) + 2 * sizeof(int32_t);
  const __m256i mask = _mm256_set1_epi8(3);
  const __m256i ones = _mm256_set1_epi8(1);
  __m256i acc = _mm256_setzero_si256();
  for (int64_t b = 0; b < n / 128; ++b, x += 32, q += 128) {
    const __m256i bytes = load256(x);
    for (int g = 0; g < 4; ++g) {
      const __m256i codes = _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(6 - 2 * g)), mask);
      const __m256i levels = load256(q + 32 * g);
      const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(codes, levels), _mm256_maddubs_epi16(ones, levels));
      acc = _mm256_add_epi32(acc, sum_i16_pairs(pairs));
    }
  }
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
  return static_cast<float>(_mm_cvtsi128_si32(sum)) / s;
}

}  // namespace okapi::quant::avx2
