// Q4_0 and Q8_0 rows (32-element blocks with one fp16 scale), and the Q8_0 / Q8_1 activation
// quantizers.
#include "kernels/avx2/row_kernels.hpp"
#include "kernels/avx2/simd.hpp"
#include "kernels/blocks.hpp"

namespace okapi::quant::avx2 {
namespace {

// roundf(): halfway cases away from zero (cvtps rounds them to even). p - trunc(p) is exact.
__m256 round_half_away(__m256 p) {
  const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 frac = _mm256_andnot_ps(sign_bit, _mm256_sub_ps(p, t));
  const __m256 away = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                    _mm256_or_ps(_mm256_and_ps(p, sign_bit), _mm256_set1_ps(1.0f)));
  return _mm256_add_ps(t, away);
}

}  // namespace

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q8_0*>(src);
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    const __m256 d = _mm256_set1_ps(half_to_float(blocks[b].d));
    store_scaled_i8x32(load256(blocks[b].qs), d, dst + b * QK8_0);
  }
}

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const block_q4_0*>(src);
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    const __m256 d = _mm256_set1_ps(half_to_float(blocks[b].d));
    const __m256i q = _mm256_sub_epi8(nibbles_lo_hi(load128(blocks[b].qs)), _mm256_set1_epi8(8));
    store_scaled_i8x32(q, d, dst + b * QK4_0);
  }
}

namespace {

// One 32-float block -> 32 int8 levels round(x / d) with d = max|x| / 127 (0 for an all-zero
// block), as the reference's quantize_8bit; returns d unrounded (the caller stores it as fp16).
float quantize_block_8bit(const float* x, int8_t* qs) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(_mm256_and_ps(v[k], abs_mask), amax);  // skips NaNs like std::max
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  __m256i q32[4];
  for (int k = 0; k < 4; ++k) q32[k] = _mm256_cvtps_epi32(round_half_away(mul_rounded(v[k], idv)));
  // packs interleave 128-bit lanes; the permute puts the 32 bytes back in element order.
  const __m256i q16 = _mm256_packs_epi32(q32[0], q32[1]);
  const __m256i q16b = _mm256_packs_epi32(q32[2], q32[3]);
  const __m256i q8 = _mm256_packs_epi16(q16, q16b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs),
                      _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return d;
}

}  // namespace

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b) blocks[b].d = float_to_half(quantize_block_8bit(src + b * QK8_0, blocks[b].qs));
}

// Q8_1 also stores s = fp16(sum(qs) * d), with the unrounded d, as the reference does.
void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<block_q8_1*>(dst);
  for (int64_t b = 0; b < n / QK8_1; ++b) {
    const float d = quantize_block_8bit(src + b * QK8_1, blocks[b].qs);
    const __m256i pair_sums = _mm256_maddubs_epi16(_mm256_set1_epi8(1), load256(blocks[b].qs));
    const int32_t sum = hsum_i32(sum_i16_pairs(pair_sums));
    blocks[b].d = float_to_half(d);
    blocks[b].s = float_to_half(static_cast<float>(sum) * d);
  }
}

// Per block: exact int32 dot in 8 lanes, then acc += (d_w*d_a) * lanes in float.
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q8_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / QK8_0;
  int64_t b = 0;
  auto block = [&](int64_t i, __m256 acc) {
    const __m256i sums = sum_i16_pairs(dot_i8_pairs(load256(x[i].qs), load256(y[i].qs)));
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc);
  };
  for (; b + 2 <= nb; b += 2) {
    acc0 = block(b, acc0);
    acc1 = block(b + 1, acc1);
  }
  if (b < nb) acc0 = block(b, acc0);
  return hsum(_mm256_add_ps(acc0, acc1));
}

// sum((q-8)*a) = sum(q*a) - 8*sum(a) with q in 0..15 unsigned: exact for every int8 activation.
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q4_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  const __m256i eight = _mm256_set1_epi8(8);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / QK4_0;
  int64_t b = 0;
  auto block = [&](int64_t i, __m256 acc) {
    const __m256i q = nibbles_lo_hi(load128(x[i].qs));
    const __m256i av = load256(y[i].qs);
    const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, av), _mm256_maddubs_epi16(eight, av));
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum_i16_pairs(pairs)), acc);
  };
  for (; b + 2 <= nb; b += 2) {
    acc0 = block(b, acc0);
    acc1 = block(b + 1, acc1);
  }
  if (b < nb) acc0 = block(b, acc0);
  return hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace okapi::quant::avx2
